import type { TranslationBundle } from '@jupyterlab/translation';

import { hasTidyRows } from '../panels/series/export';
import type { TorchDbgModel } from './model';

/** Whether an action can run now, and if not, why (shown as the tooltip). */
export interface IAvailability {
  enabled: boolean;
  /** Why it is disabled ('' when enabled). */
  why: string;
}

/**
 * Every action the panel's buttons and the palette's commands offer. The one
 * answer to "can this action run now": the buttons and the commands both read
 * it, so the palette never offers what the panel disables (issue #22).
 */
export interface IActionAvailability {
  clip: IAvailability;
  unclip: IAvailability;
  pause: IAvailability;
  resume: IAvailability;
  step: IAvailability;
  scaleLr: IAvailability;
  setLr: IAvailability;
  resetLr: IAvailability;
  emptyCache: IAvailability;
  releaseRefs: IAvailability;
  recordMemory: IAvailability;
  saveCheckpoint: IAvailability;
  measureActivations: IAvailability;
  memoryGuard: IAvailability;
  exportTensorboard: IAvailability;
  exportGrads: IAvailability;
  exportAll: IAvailability;
  skipNonfinite: IAvailability;
  replay: IAvailability;
  goToCell: IAvailability;
  debug: IAvailability;
  copyReport: IAvailability;
  resync: IAvailability;
  clearSeries: IAvailability;
  ranksClip: IAvailability;
  ranksUnclip: IAvailability;
  ranksPause: IAvailability;
  ranksResume: IAvailability;
  ranksScaleLr: IAvailability;
}

const ON: IAvailability = { enabled: true, why: '' };

/** Enabled unless one of the reasons is not '' (the first one is the reason). */
function unless(...reasons: string[]): IAvailability {
  const why = reasons.find(r => r !== '') ?? '';
  return why ? { enabled: false, why } : ON;
}

/**
 * A running multi-process job: the kernel's own loop is idle meanwhile, and
 * what the user wants are the all-rank controls.
 */
export function rankJobRunning(model: TorchDbgModel): boolean {
  return !!model.ranks.job && !model.ranks.ended;
}

/** Why the single-process training controls are off while a rank job runs. */
export function rankJobWhy(
  model: TorchDbgModel,
  trans: TranslationBundle
): string {
  const n = model.ranks.job?.world_size ?? 0;
  return trans._n(
    'A %1-rank job is running: use the all-rank controls in Ranks.',
    'A %1-rank job is running: use the all-rank controls in Ranks.',
    n
  );
}

/** What can run now on the kernel `model` reports (see `IActionAvailability`). */
export function availability(
  model: TorchDbgModel,
  trans: TranslationBundle
): IActionAvailability {
  const connected = model.state.kind === 'connected';
  const offline = connected
    ? ''
    : trans.__('The kernel side is not connected.');
  const control = model.control;
  const state = control.state;
  const paused = state?.paused ?? false;
  const running = control.running;
  const idle = control.idle || state === null;
  const rankJob = rankJobRunning(model);
  const idleWhy = rankJob
    ? rankJobWhy(model, trans)
    : trans.__('Idle: nothing is training');
  const subshells = model.hello?.capabilities.subshells ?? false;
  const tensorboard = model.hello?.capabilities.tensorboard;

  // learning rate: per optimizer (protocol 2.3), else the old factor
  const truthful = state?.targets !== undefined;
  const target = control.target;
  const byHandWhy = target?.by_hand
    ? trans.__('A loop without torch.optim: the learning rate is in your code.')
    : '';
  const noTarget = target
    ? ''
    : trans.__(
        'No optimizer has stepped yet: the learning rate is read at its step.'
      );
  const changed = target?.groups.some(g => g.changed) ?? false;
  const lrIdle = idle
    ? rankJob
      ? idleWhy
      : trans.__(
          'Idle: nothing is training. Set the learning rate in your cell.'
        )
    : '';
  const lrChange = truthful
    ? unless(offline, lrIdle, noTarget, byHandWhy)
    : unless(offline);
  const resetLr = truthful
    ? unless(
        offline,
        noTarget,
        byHandWhy,
        changed
          ? ''
          : trans.__('The learning rate was not changed from the panel.')
      )
    : unless(
        offline,
        state?.lr_scale === null || state?.lr_scale === undefined
          ? trans.__('The learning rate was not changed from the panel.')
          : ''
      );

  // memory
  const mem = model.memory.status;
  const noMemory = mem
    ? ''
    : trans.__('Memory figures appear once torch is imported in the kernel.');
  const cuda = mem?.state === 'active' || mem?.state === 'corrupted';
  const recording = (mem?.recording.state ?? 'off') !== 'off';
  const noCuda = cuda ? '' : trans.__('Needs CUDA in use by this kernel.');

  // gradients
  const grads = model.grads.status;
  const noGrads = grads
    ? ''
    : trans.__('The gradient monitor starts at the first optimizer.step().');

  // the last exception
  const exc = model.exception.current;
  const noExc = exc ? '' : trans.__('No exception to show.');

  // ranks
  const ranks = model.ranks;
  const job = ranks.job;
  const ranksBlocked = !job
    ? trans.__('No multi-process job has attached to this kernel.')
    : ranks.ended
      ? trans.__('The job has ended: no rank is left to act on.')
      : ranks.note?.kind === 'sending'
        ? trans.__('Waiting for the ranks to answer the last action.')
        : '';
  const ranksPaused =
    ranks.pausedRanks.length > 0 || (job?.paused_at ?? null) !== null;
  const pausePending = job?.pending?.action.replace(/^ranks_/, '') === 'pause';
  const allPaused =
    ranks.liveRanks.length > 0 &&
    ranks.liveRanks.every(r => ranks.pausedRanks.includes(r));

  return {
    // the kernel's own clip would not reach the ranks: their Clip is in Ranks
    clip: unless(offline, rankJob ? idleWhy : ''),
    unclip: unless(
      offline,
      state?.clip === null || state?.clip === undefined
        ? trans.__('Not clipping.')
        : ''
    ),
    pause: unless(
      offline,
      paused ? trans.__('Already paused.') : '',
      running ? '' : idleWhy,
      subshells
        ? ''
        : trans.__('Pausing needs kernel subshells (ipykernel ≥ 7)')
    ),
    resume: unless(offline, paused ? '' : trans.__('Nothing is paused.')),
    step: unless(
      offline,
      paused
        ? ''
        : trans.__('Step lets one step through a pause: nothing is paused.'),
      running ? '' : idleWhy
    ),
    scaleLr: lrChange,
    setLr: lrChange,
    resetLr,
    emptyCache: unless(offline, noMemory, noCuda),
    releaseRefs: unless(offline, noMemory),
    recordMemory: unless(offline, noMemory, cuda || recording ? '' : noCuda),
    saveCheckpoint: unless(offline, noMemory),
    measureActivations: unless(
      offline,
      noMemory,
      rankJob ? idleWhy : '',
      mem?.activations?.state === 'armed'
        ? trans.__('Already armed: the next forward/backward is measured.')
        : ''
    ),
    memoryGuard: unless(offline, noMemory),
    exportTensorboard: unless(
      offline,
      tensorboard?.available === false
        ? (tensorboard.reason ??
            trans.__(
              'Install tensorboard in the kernel to export event files.'
            ))
        : tensorboard
          ? ''
          : trans.__('This kernel cannot write TensorBoard files.'),
      (model.runs.current ?? model.runs.runs.length)
        ? ''
        : trans.__('No run yet: train first.')
    ),
    exportGrads: unless(noGrads),
    exportAll: unless(
      hasTidyRows(model) ? '' : trans.__('Nothing was logged or monitored yet.')
    ),
    skipNonfinite: unless(offline, noGrads),
    replay: unless(
      offline,
      noGrads,
      grads?.replayable ? '' : trans.__('No non-finite step is kept to replay.')
    ),
    goToCell: unless(noExc),
    debug: unless(
      noExc,
      exc && !exc.debuggable
        ? exc.rank
          ? trans.__(
              'It was raised in the process of rank %1, not in this kernel: %debug cannot reach it',
              String(exc.rank.rank)
            )
          : trans.__(
              'A newer error replaced this one (or references were released).'
            )
        : ''
    ),
    copyReport: unless(noExc),
    resync: unless(offline),
    clearSeries: unless(offline),
    ranksClip: unless(
      offline,
      ranksBlocked,
      job?.sharded
        ? trans.__(
            'The gradients are sharded (FSDP): an all-rank clip needs the global norm on every rank, a collective the extension does not add. Clip in your loop (clip_grad_norm_ handles sharded gradients).'
          )
        : ''
    ),
    ranksUnclip: unless(
      offline,
      ranksBlocked,
      ranks.clip === null ? trans.__('No rank is clipping') : ''
    ),
    ranksPause: unless(
      offline,
      ranksBlocked,
      allPaused ? trans.__('Every rank is paused') : '',
      pausePending ? trans.__('A pause is already agreed') : ''
    ),
    ranksResume: unless(
      offline,
      ranksBlocked,
      ranksPaused || pausePending ? '' : trans.__('No rank is paused')
    ),
    ranksScaleLr: unless(offline, ranksBlocked)
  };
}
