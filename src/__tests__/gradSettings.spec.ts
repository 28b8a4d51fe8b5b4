/**
 * The user's gradient settings reach every kernel as an allowlisted action (the
 * kernel validates them, R14): on connect, again after a restart (new session),
 * and to connected kernels when the settings change; refusals are reported.
 */
import { TorchDbgConnection } from '../connection/connection';
import { GradSettingsSync } from '../plugins/gradSettings';
import { FakeKernel, flush, loadedKernel } from './fakeKernel';
import { schemaDef } from './schema';

const action = schemaDef('Action');

const kernelSide = (kernel: FakeKernel, session = 's1'): void =>
  loadedKernel(kernel, { session_id: session });

type Sent = {
  method: string;
  action: string;
  args: unknown;
  request_id: string;
};

const actions = (kernel: FakeKernel): Sent[] =>
  kernel.comms
    .flatMap(c => c.sent as Sent[])
    .filter(m => m.method === 'action');

describe('GradSettingsSync', () => {
  it('sends nothing while the settings are the defaults', async () => {
    const kernel = new FakeKernel();
    kernelSide(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const sync = new GradSettingsSync(() => undefined);
    sync.update({ sampling: 'auto', thresholds: {} }, [conn]);
    expect(actions(kernel)).toEqual([]);
  });

  it('pushes thresholds and sampling on connect, after a restart and on change', async () => {
    const kernel = new FakeKernel();
    kernelSide(kernel);
    const sync = new GradSettingsSync(() => undefined);
    sync.update(
      { sampling: 'every step', thresholds: { explode_factor: 20 } },
      []
    );
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    sync.track(conn);
    await conn.connect();
    let sent = actions(kernel);
    expect(sent.map(m => [m.action, m.args])).toEqual([
      ['set_thresholds', { explode_factor: 20 }],
      ['set_stride', { stride: 1 }]
    ]);
    for (const m of sent) {
      expect(action(m)).toBe(true); // what the panel sends is valid protocol
    }
    // the same session reconnecting (page reload) gets nothing new
    kernel.comms[0].closeFromKernel();
    await conn.connect();
    expect(actions(kernel)).toHaveLength(2);
    // a restarted kernel (new session) starts from its defaults: pushed again
    kernelSide(kernel, 's2');
    await conn.connect();
    expect(actions(kernel)).toHaveLength(4);
    // a change goes to the connected kernel at once; back to 'auto' is sent too
    sync.update({ sampling: 'auto', thresholds: { vanish_steps: 10 } }, [conn]);
    sent = actions(kernel).slice(4);
    expect(sent.map(m => [m.action, m.args])).toEqual([
      ['set_thresholds', { vanish_steps: 10 }],
      ['set_stride', { stride: 'auto' }]
    ]);
  });

  it('reports the kernel refusing a setting with its own message', async () => {
    const kernel = new FakeKernel();
    kernelSide(kernel);
    const conn = new TorchDbgConnection({ kernel: kernel.asKernel() });
    await conn.connect();
    const errors: string[] = [];
    const sync = new GradSettingsSync(m => errors.push(m));
    sync.update({ sampling: 'auto', thresholds: { explode_factor: 0.5 } }, [
      conn
    ]);
    const [m] = actions(kernel);
    kernel.comms[kernel.comms.length - 1].deliver({
      method: 'error',
      request_id: m.request_id,
      code: 'invalid_args',
      message: 'explode_factor must be > 1, got 0.5'
    });
    await flush();
    expect(errors).toEqual([
      'Torch Debugger settings (gradientThresholds): explode_factor must be > 1, got 0.5'
    ]);
  });
});
