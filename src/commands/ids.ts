/** Command ids (all in the palette under "Torch Debugger"). */
export namespace CommandIDs {
  export const open = 'torchdbg:open-panel';
  export const toggle = 'torchdbg:toggle-panel';
  export const load = 'torchdbg:load';
  export const resync = 'torchdbg:resync';
  export const clearSeries = 'torchdbg:clear-series';
  export const exportCsv = 'torchdbg:export-grads-csv';
  export const exportJson = 'torchdbg:export-grads-json';
  export const exportAll = 'torchdbg:export-all-csv';
  export const goToFailingCell = 'torchdbg:go-to-failing-cell';
  export const debugException = 'torchdbg:debug-exception';
  export const copyReport = 'torchdbg:copy-exception-report';
  export const clip = 'torchdbg:clip';
  export const unclip = 'torchdbg:unclip';
  export const pause = 'torchdbg:pause';
  export const resume = 'torchdbg:resume';
  export const step = 'torchdbg:step';
  export const halveLr = 'torchdbg:halve-lr';
  export const setLr = 'torchdbg:set-lr';
  export const resetLr = 'torchdbg:reset-lr';
  export const emptyCache = 'torchdbg:empty-cache';
  export const releaseRefs = 'torchdbg:release-references';
  export const recordMemory = 'torchdbg:record-memory';
  export const saveCheckpoint = 'torchdbg:save-checkpoint';
  export const measureActivations = 'torchdbg:measure-activations';
  export const memoryGuard = 'torchdbg:toggle-memory-guard';
  export const exportTensorboard = 'torchdbg:export-tensorboard';
  export const replayStep = 'torchdbg:replay-bad-step';
  export const skipNonfinite = 'torchdbg:skip-nonfinite-steps';
  export const ranksClip = 'torchdbg:ranks-clip';
  export const ranksUnclip = 'torchdbg:ranks-unclip';
  export const ranksPause = 'torchdbg:ranks-pause';
  export const ranksResume = 'torchdbg:ranks-resume';
  export const ranksHalveLr = 'torchdbg:ranks-halve-lr';
}

export const PALETTE_CATEGORY = 'Torch Debugger';
