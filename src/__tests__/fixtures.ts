import { routeMessage } from '../connection/router';
import type { TorchDbgModel } from '../model/model';
import type { IControlTarget } from '../protocol/generated';
import type { IControl, IGradTrack, KernelMessage } from '../protocol/messages';
import { schemaDef } from './schema';

const kernelMessage = schemaDef('KernelMessage');
const controlMessage = schemaDef('Control');

/** Route a kernel message to `model` after checking it against the schema. */
export function deliver(
  model: TorchDbgModel,
  msg: KernelMessage,
  buffers: ArrayBuffer[] = []
): void {
  if (!kernelMessage(msg)) {
    throw new Error(JSON.stringify(kernelMessage.errors));
  }
  routeMessage(model, msg, buffers, 's1');
}

/** A Training-control target: optimizer `opt`, stepping, one group at lr 0.5. */
export function controlTarget(
  over: Partial<IControlTarget> = {}
): IControlTarget {
  return {
    key: 'opt#1',
    name: 'opt',
    stepping: true,
    by_hand: false,
    groups: [{ index: 0, lr: 0.5, initial_lr: null, changed: false }],
    ...over
  };
}

/** A `control` message of run 2 at step 12 with one target (checked by the schema). */
export function controlState(over: Partial<IControl> = {}): IControl {
  const msg: IControl = {
    method: 'control',
    clip: null,
    paused: false,
    paused_at: null,
    step: 12,
    lr_scale: null,
    optimizers: ['opt'],
    last_refusal: null,
    idle: false,
    run: 2,
    targets: [controlTarget()],
    target: 'opt#1',
    ...over
  };
  if (!controlMessage(msg)) {
    throw new Error(JSON.stringify(controlMessage.errors));
  }
  return msg;
}

/**
 * A gradient track as the kernel's `grads` status sends it (an active track of
 * optimizer `name` at step 3, sampled every step, no layers); `over` replaces fields.
 */
export function gradTrack(
  name = 'opt',
  over: Partial<IGradTrack> = {}
): IGradTrack {
  return {
    name,
    state: 'active',
    reason: null,
    step: 3,
    sampled: 3,
    mode: 'auto',
    stride: 1,
    overhead: 0.004,
    step_time_s: 0.01,
    sample_cost_s: 0.0001,
    skipped_steps: 0,
    amp_scale: null,
    local_shard: false,
    coarsened: false,
    total_series: `grad/${name}/total`,
    scale_series: null,
    layers_version: 1,
    ...over
  };
}
