import type { TranslationBundle } from '@jupyterlab/translation';

import type { TorchDbgModel } from '../../model/model';

/**
 * Why the gradient section has no track to show, in the user's words: a rank
 * job trains in other processes (its norms are in Ranks), the current run only
 * calls `log()`, or nothing has stepped yet. Only what the panel knows is said:
 * the tracks the kernel reports are empty, and the runs and ranks messages.
 */
export function gradsEmptyText(
  model: TorchDbgModel,
  trans: TranslationBundle
): string {
  const job = model.ranks.job;
  if (job && job.state === 'running') {
    return trans.__(
      'This kernel does not train: a %1-rank job does. Its gradient norms are in Ranks.',
      String(job.world_size)
    );
  }
  const current = model.runs.current;
  const run = model.runs.runs.find(r => r.id === current);
  if (run && run.steps === 0 && run.optimizers.length === 0) {
    return trans.__(
      'Run %1 only logs values so far: no optimizer has stepped and no watched model has run backward in it. Norms appear at the first optimizer.step() (or, for a loop that updates its weights by hand, after a backward of a model that existed when the cell started, or of one passed to watch(model) before its loop).',
      String(run.id)
    );
  }
  return trans.__(
    'No optimizer has stepped yet. Norms appear at the next optimizer.step() (or, for a loop that updates its weights by hand, after a backward of a model that existed when the cell started, or of one passed to watch(model) before its loop).'
  );
}
