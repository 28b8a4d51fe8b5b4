/**
 * The gradient section's empty state says why it is empty (issue #22, item 8):
 * a run that only calls `log()` is not "no optimizer has stepped yet" of some
 * earlier time, and a rank job's norms are in Ranks (ranks.spec.ts).
 */
import { TorchDbgModel } from '../model/model';
import { gradsEmptyText } from '../panels/grads/emptyText';
import type { IRunInfo } from '../protocol/generated';
import { trans } from './translate';

function runInfo(id: number, over: Partial<IRunInfo> = {}): IRunInfo {
  return {
    id,
    start: 1718000000 + id,
    end: null,
    reason: id === 1 ? 'first' : 'idle',
    cell_id: 'c1',
    execution_count: 2 + id,
    optimizers: [],
    steps: 0,
    alerts: 0,
    ...over
  };
}

describe('gradsEmptyText', () => {
  it('before any run: nothing has stepped yet, and how a hand-updated loop is watched', () => {
    const model = new TorchDbgModel();
    const text = gradsEmptyText(model, trans);
    expect(text).toContain('No optimizer has stepped yet');
    expect(text).toContain('watch(model)');
    // a model made in the training cell itself is hooked from the next cell
    expect(text).toContain('existed when the cell started');
  });

  it('a current run that only logs says so, naming the run', () => {
    const model = new TorchDbgModel();
    model.runs.apply({
      method: 'runs',
      current: 2,
      runs: [
        runInfo(1, { optimizers: ['opt'], steps: 40, end: 1718000100 }),
        runInfo(2)
      ]
    });
    expect(gradsEmptyText(model, trans)).toMatch(
      /^Run 2 only logs values so far/
    );
  });

  it('a current run whose optimizer stepped is not called log-only', () => {
    const model = new TorchDbgModel();
    model.runs.apply({
      method: 'runs',
      current: 3,
      runs: [runInfo(3, { optimizers: ['opt'], steps: 1 })]
    });
    expect(gradsEmptyText(model, trans)).not.toContain('only logs');
  });
});
