/**
 * @jest-environment jsdom
 *
 * The replay of a non-finite step in the gradient alarms (replayView.tsx,
 * alertList.tsx), rendered with React in jsdom: the button appears on the
 * alert of the step the kernel kept (`grads.replayable`) only, is busy while
 * the kernel replays and shows a refusal; a `non_finite_replay` alert shows
 * the backward op in bold and the forward stack as text.
 */
import { act, mountEach, React } from './dom';
import type { TorchDbgConnection } from '../connection/connection';
import { TorchDbgModel } from '../model/model';
import type { AlertList as AlertListT } from '../panels/grads/alertList';
import type { IAck, IAlertItem, IError, IGrads } from '../protocol/messages';
import type { IReplayResult } from '../protocol/generated';
import { schemaDef } from './schema';
import { trans, XSS } from './translate';

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  AlertList
}: { AlertList: typeof AlertListT } = require('../panels/grads/alertList');
/* eslint-enable @typescript-eslint/no-require-imports */

const alertItem = schemaDef('AlertItem');
const replayResult = schemaDef('ReplayResult');

const result: IReplayResult = {
  step: 4,
  track: 'opt',
  root: 'model',
  weights: 'pre-step',
  loss_root: 'model',
  cause: 'backward',
  backward_op: 'SqrtBackward0',
  anomaly_op: 'MulBackward0',
  output: null,
  forward_stack: [
    {
      file: '/home/u/project/model.py',
      line: 12,
      name: 'forward',
      code: 'h = self.block(x)'
    },
    {
      file: '/tmp/ipykernel_42/123456.py',
      line: 7,
      name: 'forward',
      code: `return torch.sqrt(h * 0).mean()  # ${XSS}`
    }
  ],
  finite: false,
  message:
    'Step 4 replayed under anomaly detection: SqrtBackward0 returned NaN/Inf'
};

function alert(over: Partial<IAlertItem> = {}): IAlertItem {
  return {
    id: 'grads-1',
    source: 'grads',
    kind: 'non_finite',
    severity: 'error',
    step: 4,
    layer: 'model.fc',
    message: 'Non-finite gradient at step 4',
    remedy: 'Lower the learning rate',
    track: 'opt',
    value: 'NaN',
    time: 1718000000,
    ...over
  };
}

function status(replayable: IGrads['replayable']): IGrads {
  return {
    method: 'grads',
    state: 'active',
    reason: null,
    mode: 'auto',
    stride: null,
    budget: 0.01,
    thresholds: {} as IGrads['thresholds'],
    alerts: 1,
    tracks: [],
    replayable
  };
}

/** A connection whose `replay_step` answers once `answer` is called. */
function fakeConn(): {
  conn: TorchDbgConnection;
  sent: { action: string; args: unknown }[];
  answer: (reply: IAck | IError) => void;
} {
  const sent: { action: string; args: unknown }[] = [];
  let settle: (reply: IAck | IError) => void = () => undefined;
  const conn = {
    sendAction: (action: string, args: unknown) => {
      sent.push({ action, args });
      return new Promise(resolve => {
        settle = resolve;
      });
    }
  } as unknown as TorchDbgConnection;
  return { conn, sent, answer: r => settle(r) };
}

const dom = mountEach();

function render(
  model: TorchDbgModel,
  alerts: IAlertItem[],
  conn?: TorchDbgConnection
): void {
  dom.render(React.createElement(AlertList, { alerts, model, conn, trans }));
}

const buttons = (): HTMLButtonElement[] =>
  Array.from(dom.host.querySelectorAll('.jp-TorchDbg-replayAction button'));

describe('replay of a non-finite step', () => {
  it('uses fixtures the schema accepts', () => {
    expect(replayResult(result)).toBe(true);
    expect(
      alertItem(
        alert({ id: 'grads-2', kind: 'non_finite_replay', replay: result })
      )
    ).toBe(true);
    expect(alertItem(alert())).toBe(true);
  });

  it('offers the replay only on the kept step, busy while it runs, then the refusal', async () => {
    const model = new TorchDbgModel();
    const { conn, sent, answer } = fakeConn();
    const older = alert({ id: 'grads-0', step: 2 });
    render(model, [older, alert()], conn);
    expect(buttons()).toHaveLength(0); // nothing kept: no button

    model.grads.apply(status({ track: 'opt', step: 4 }));
    render(model, [older, alert()], conn);
    expect(buttons()).toHaveLength(1);
    const li = buttons()[0].closest('li')!;
    expect(li.textContent).toContain('Non-finite gradient at step 4');

    act(() => buttons()[0].click());
    expect(sent).toEqual([{ action: 'replay_step', args: { track: 'opt' } }]);
    expect(buttons()[0].disabled).toBe(true);
    expect(buttons()[0].textContent).toBe('Replaying…');

    await act(async () => {
      answer({
        method: 'error',
        request_id: 'r',
        code: 'refused',
        message: 'the running cell reached no optimizer step in 30 s'
      });
    });
    expect(buttons()[0].disabled).toBe(false);
    expect(dom.host.querySelector('.jp-TorchDbg-replayNote')?.textContent).toBe(
      'the running cell reached no optimizer step in 30 s'
    );
  });

  it('shows the backward op in bold and the forward stack as text', () => {
    const model = new TorchDbgModel();
    model.grads.apply(status({ track: 'opt', step: 4 }));
    const replayAlert = alert({
      id: 'grads-2',
      kind: 'non_finite_replay',
      message: result.message,
      replay: result
    });
    render(model, [alert(), replayAlert], fakeConn().conn);
    expect(
      dom.host.querySelector('strong.jp-TorchDbg-replayOp')?.textContent
    ).toBe('SqrtBackward0');
    const frames = Array.from(
      dom.host.querySelectorAll('.jp-TorchDbg-replayStack li')
    );
    expect(
      frames.map(f => f.querySelector('.jp-TorchDbg-replayWhere')?.textContent)
    ).toEqual(['model.py:12 forward', '123456.py:7 forward']);
    expect(frames[1].getAttribute('title')).toBe(
      '/tmp/ipykernel_42/123456.py:7'
    );
    expect(frames[1].querySelector('code')?.textContent).toContain(XSS);
    expect(dom.host.querySelector('img')).toBeNull(); // kernel text stays text
    expect(dom.host.textContent).toContain('pre-step weights');
    // The replay's own alert offers no second replay: one button, on the bad step's alert.
    expect(buttons()).toHaveLength(1);
    expect(buttons()[0].closest('li')?.getAttribute('data-kind')).toBe(
      'non_finite'
    );
  });

  it('says so when the NaN does not reproduce with your loss, on the current weights', () => {
    const model = new TorchDbgModel();
    const finite: IReplayResult = {
      ...result,
      cause: 'finite',
      finite: true,
      backward_op: null,
      anomaly_op: null,
      weights: 'current',
      loss_root: 'loss_module:criterion',
      user_loss: 'same',
      reproduces: false,
      forward_stack: []
    };
    render(model, [alert({ kind: 'non_finite_replay', replay: finite })]);
    expect(dom.host.textContent).toContain('the NaN does not reproduce');
    expect(dom.host.textContent).toContain(
      'current weights (no pre-step copy)'
    );
    expect(dom.host.textContent).toContain('loss: criterion');
    expect(dom.host.querySelector('.jp-TorchDbg-replayStack')).toBeNull();
  });

  it('r47: a finite surrogate replay never says the NaN does not reproduce', () => {
    const model = new TorchDbgModel();
    const surrogate: IReplayResult = {
      ...result,
      cause: 'finite',
      finite: true,
      backward_op: null,
      anomaly_op: null,
      loss_root: 'surrogate',
      user_loss: 'not_rerun',
      reproduces: null,
      forward_stack: []
    };
    render(model, [alert({ kind: 'non_finite_replay', replay: surrogate })]);
    expect(dom.host.textContent).not.toContain('does not reproduce');
    expect(dom.host.textContent).toContain('your loss was not re-run');
    expect(dom.host.textContent).toContain(
      'backward from the sum of the outputs, not your loss'
    );
  });
});
