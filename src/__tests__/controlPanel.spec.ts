/**
 * @jest-environment jsdom
 *
 * The training-control panel rendered with React in jsdom, fed `control`
 * messages (protocol 2.3, checked against the schema): idle disables Pause,
 * Step and the LR controls and says why; the LR shown is the kernel's, per
 * param group; Enter / Set send `set_lr` for that group of the picked
 * optimizer; Reset LR only when this run changed it; a loop without
 * torch.optim says "at the end of backward".
 */
import { act, mountEach, React } from './dom';
import type { TorchDbgConnection } from '../connection/connection';
import { TorchDbgModel } from '../model/model';
import type { ControlPanel as ControlPanelT } from '../panels/control/body';
import type { IAck, IControl, IError } from '../protocol/messages';
import { hello } from './fakeKernel';
import { controlState, controlTarget } from './fixtures';
import { trans } from './translate';

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  ControlPanel
}: { ControlPanel: typeof ControlPanelT } = require('../panels/control/body');
/* eslint-enable @typescript-eslint/no-require-imports */

/** A connected model and a connection whose actions answer with `reply`. */
function setup(reply: (action: string) => IAck | IError = okReply) {
  const model = new TorchDbgModel();
  model.hello = hello() as unknown as TorchDbgModel['hello'];
  model.state = { kind: 'connected' };
  const sent: { action: string; args: Record<string, unknown> }[] = [];
  const conn = {
    model,
    sendAction: (action: string, args: Record<string, unknown>) => {
      sent.push({ action, args });
      return Promise.resolve(reply(action));
    }
  } as unknown as TorchDbgConnection;
  return { model, conn, sent };
}

function okReply(action: string): IAck {
  return { method: 'ack', request_id: 'r', action, result: {} };
}

const dom = mountEach();

function render(conn: TorchDbgConnection): void {
  dom.render(React.createElement(ControlPanel, { conn, trans }));
}

const $ = <T extends Element = HTMLElement>(sel: string) =>
  dom.host.querySelector(sel) as T | null;
const button = (label: string) =>
  Array.from(dom.host.querySelectorAll('button')).find(
    b => b.textContent === label
  ) as HTMLButtonElement;
const stateText = () => $('.jp-TorchDbg-controlStateText')?.textContent;
const lrInputs = () =>
  Array.from(
    dom.host.querySelectorAll<HTMLInputElement>('.jp-TorchDbg-lrInput')
  );

/** The kernel sends a `control` message; the panel re-renders at the next frame. */
async function kernelSays(model: TorchDbgModel, msg: IControl): Promise<void> {
  await act(async () => {
    model.control.apply(msg);
    await new Promise(resolve => requestAnimationFrame(resolve));
  });
}

/** Click, and let the action's reply arrive. */
async function click(el: HTMLElement): Promise<void> {
  await act(async () => {
    el.click();
    await new Promise(resolve => setTimeout(resolve, 0));
  });
}

/** Type into a React-controlled input (the native setter, then `input`). */
function type(input: HTMLInputElement, text: string): void {
  const setter = Object.getOwnPropertyDescriptor(
    HTMLInputElement.prototype,
    'value'
  )!.set!;
  act(() => {
    setter.call(input, text);
    input.dispatchEvent(new Event('input', { bubbles: true }));
  });
}

describe('control panel: idle', () => {
  it('says nothing is training and disables Pause, Step and the LR controls, with why', async () => {
    const { model, conn } = setup();
    model.control.apply(controlState({ idle: true }));
    render(conn);
    expect(stateText()).toBe('Idle: nothing is training.');
    expect(dom.host.textContent).not.toContain('Controls apply');
    expect(button('Pause').disabled).toBe(true);
    expect(button('Pause').title).toBe('Idle: nothing is training');
    expect(button('LR ×0.5').disabled).toBe(true);
    const [lr] = lrInputs();
    expect(lr.disabled).toBe(true);
    expect(lr.title).toContain('Idle: nothing is training');
    // clipping is not a training action: it waits for the next step
    expect(button('Clip').disabled).toBe(false);
    // the last run changed the lr: Reset works after the run (issue #22; the
    // kernel applies it at once), and says so
    await kernelSays(
      model,
      controlState({
        idle: true,
        targets: [
          controlTarget({
            groups: [{ index: 0, lr: 0.25, initial_lr: 0.5, changed: true }]
          })
        ]
      })
    );
    expect(button('Reset LR').disabled).toBe(false);
    expect(button('Reset LR').title).toContain(
      'now (nothing is training): 0.5'
    );
    expect(button('LR ×0.5').disabled).toBe(true);
    // paused but idle (the kernel said so): Step is refused as well
    await kernelSays(
      model,
      controlState({ idle: true, paused: true, paused_at: 3 })
    );
    expect(button('Step').disabled).toBe(true);
  });

  it('before any state from the kernel, nothing claims to be running', async () => {
    const { conn } = setup();
    render(conn);
    expect(stateText()).toBe('Idle: nothing is training.');
    expect(button('Pause').disabled).toBe(true);
  });

  it('the current run, not idle: Running, Pause enabled', async () => {
    const { model, conn } = setup();
    model.control.apply(controlState());
    render(conn);
    expect(stateText()).toBe(
      'Running. Controls apply at the next optimizer.step().'
    );
    expect(button('Pause').disabled).toBe(false);
    // no run current (the kernel has not seen a step): not "Running"
    await kernelSays(model, controlState({ run: null }));
    expect(stateText()).toBe('Idle: nothing is training.');
  });

  it('a loop without torch.optim: controls apply at the end of backward; no LR to set', async () => {
    const { model, conn } = setup();
    model.control.apply(
      controlState({
        targets: [
          controlTarget({
            key: 'net#2',
            name: 'net',
            by_hand: true,
            groups: []
          })
        ],
        target: 'net#2'
      })
    );
    render(conn);
    expect(stateText()).toBe('Running. Controls apply at the end of backward.');
    expect(lrInputs()).toEqual([]);
    expect(button('LR ×0.5').disabled).toBe(true);
    expect(dom.host.textContent).toContain('A loop without torch.optim');
  });
});

describe('control panel: the learning rate is the kernel’s', () => {
  it('shows each group’s lr as reported, and follows the kernel, never a local guess', async () => {
    const { model, conn } = setup();
    model.control.apply(
      controlState({
        targets: [
          controlTarget({
            groups: [
              { index: 0, lr: 0.5, initial_lr: null, changed: false },
              { index: 1, lr: 0.05, initial_lr: null, changed: false }
            ]
          })
        ]
      })
    );
    render(conn);
    expect(lrInputs().map(i => i.value)).toEqual(['0.5', '0.05']);
    expect($('.jp-TorchDbg-lrChip')).toBeNull();
    // the panel changed it in this run: the chip says the kernel's lr, not "×0.5"
    await kernelSays(
      model,
      controlState({
        lr_scale: 0.5,
        targets: [
          controlTarget({
            groups: [
              { index: 0, lr: 0.25, initial_lr: 0.5, changed: true },
              { index: 1, lr: 0.025, initial_lr: 0.05, changed: true }
            ]
          })
        ]
      })
    );
    expect(lrInputs().map(i => i.value)).toEqual(['0.25', '0.025']);
    expect($('.jp-TorchDbg-lrChip')!.textContent).toBe('lr 0.25, 0.025');
    expect(
      Array.from(dom.host.querySelectorAll('.jp-TorchDbg-chip')).map(
        c => c.textContent
      )
    ).toEqual(['lr 0.25, 0.025']);
  });

  it('Enter sends set_lr for that group of that optimizer; the kernel’s value shows after', async () => {
    const { model, conn, sent } = setup();
    model.control.apply(controlState());
    render(conn);
    const [lr] = lrInputs();
    type(lr, '0.01');
    expect(lr.value).toBe('0.01');
    // still the kernel's value in the data attribute until it reports the change
    expect(lr.dataset.lr).toBe('0.5');
    await act(async () => {
      lr.dispatchEvent(
        new KeyboardEvent('keydown', { key: 'Enter', bubbles: true })
      );
      await new Promise(resolve => setTimeout(resolve, 0));
    });
    expect(sent).toEqual([
      { action: 'set_lr', args: { lr: 0.01, optimizer: 'opt#1', group: 0 } }
    ]);
    expect(dom.host.textContent).toContain(
      'lr 0.01 set: it applies at the next step.'
    );
    // the draft is gone: the field shows what the kernel reports (not yet changed)
    expect(lrInputs()[0].value).toBe('0.5');
    await kernelSays(
      model,
      controlState({
        targets: [
          controlTarget({
            groups: [{ index: 0, lr: 0.01, initial_lr: 0.5, changed: true }]
          })
        ]
      })
    );
    expect(lrInputs()[0].value).toBe('0.01');
  });

  it('rejects a typed lr that is not a number > 0; Set is off until valid', async () => {
    const { model, conn, sent } = setup();
    model.control.apply(controlState());
    render(conn);
    const set = () => $<HTMLButtonElement>('.jp-TorchDbg-lrSet')!;
    expect(set().disabled).toBe(true);
    type(lrInputs()[0], '-1');
    expect(lrInputs()[0].getAttribute('aria-invalid')).toBe('true');
    expect(set().disabled).toBe(true);
    type(lrInputs()[0], '3e-4');
    expect(set().disabled).toBe(false);
    await click(set());
    expect(sent[0]).toEqual({
      action: 'set_lr',
      args: { lr: 3e-4, optimizer: 'opt#1', group: 0 }
    });
  });

  it('Reset LR only when this run changed it, restoring on the picked optimizer', async () => {
    const { model, conn, sent } = setup();
    model.control.apply(controlState());
    render(conn);
    expect(button('Reset LR').disabled).toBe(true);
    await kernelSays(
      model,
      controlState({
        targets: [
          controlTarget({
            groups: [{ index: 0, lr: 0.25, initial_lr: 0.5, changed: true }]
          })
        ]
      })
    );
    expect(button('Reset LR').disabled).toBe(false);
    expect(button('Reset LR').title).toContain('0.5');
    await click(button('Reset LR'));
    expect(sent).toEqual([
      { action: 'reset_lr', args: { optimizer: 'opt#1' } }
    ]);
  });

  it('several optimizers: the kernel’s default first, a picker, actions on the picked one', async () => {
    const { model, conn, sent } = setup();
    const d = controlTarget({
      key: 'opt_d#3',
      name: 'opt_d',
      groups: [{ index: 0, lr: 0.0002, initial_lr: null, changed: false }]
    });
    const g = controlTarget({
      key: 'opt_g#4',
      name: 'opt_g',
      groups: [{ index: 0, lr: 0.001, initial_lr: null, changed: false }]
    });
    model.control.apply(controlState({ targets: [d, g], target: 'opt_g#4' }));
    render(conn);
    const select = $<HTMLSelectElement>('.jp-TorchDbg-lrTarget')!;
    expect(select.value).toBe('opt_g#4');
    expect(lrInputs()[0].value).toBe('0.001');
    await act(async () => {
      select.value = 'opt_d#3';
      select.dispatchEvent(new Event('change', { bubbles: true }));
      await new Promise(resolve => requestAnimationFrame(resolve));
    });
    expect(lrInputs()[0].value).toBe('0.0002');
    await click(button('LR ×0.5'));
    expect(sent).toEqual([
      { action: 'scale_lr', args: { factor: 0.5, optimizer: 'opt_d#3' } }
    ]);
    // one optimizer: no picker
    await kernelSays(model, controlState());
    expect($('.jp-TorchDbg-lrTarget')).toBeNull();
  });

  it('shows the kernel’s refusal', async () => {
    const { model, conn } = setup(action => ({
      method: 'error',
      request_id: 'r',
      code: 'refused',
      message: `${action}: nothing is training: set the learning rate in your cell`
    }));
    model.control.apply(controlState());
    render(conn);
    await click(button('LR ×0.5'));
    expect(dom.host.textContent).toContain(
      'scale_lr: nothing is training: set the learning rate in your cell'
    );
  });

  it('a kernel before protocol 2.3 keeps the old controls', async () => {
    const { model, conn } = setup();
    const old = controlState({ lr_scale: 0.5 });
    delete old.idle;
    delete old.run;
    delete old.targets;
    delete old.target;
    model.control.apply(old);
    render(conn);
    expect(stateText()).toBe(
      'Running. Controls apply at the next optimizer.step().'
    );
    expect($('.jp-TorchDbg-lrChip')!.textContent).toBe('LR ×0.5');
    expect(button('Reset LR').disabled).toBe(false);
    expect(lrInputs()).toEqual([]);
  });
});
