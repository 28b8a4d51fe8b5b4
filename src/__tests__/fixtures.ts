import type { IGradTrack } from '../protocol/messages';

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
