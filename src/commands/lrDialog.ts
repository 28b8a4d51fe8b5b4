import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { formatLr, parseLr } from '../panels/control/lr';
import type { IControlTarget } from '../protocol/generated';
import { wireNumber } from '../protocol/messages';

/** What the dialog returns: the lr and the group (null: every group, ratios kept). */
export interface ILrChoice {
  lr: number;
  group: number | null;
}

/**
 * The Set Learning Rate dialog's body: a text field checked as typed (a
 * number > 0 and ≤ 1e6, as the kernel accepts) with the reason shown under it,
 * and, for an optimizer with several param groups, which group.
 */
class LrBody extends Widget {
  constructor(target: IControlTarget, error: string, trans: TranslationBundle) {
    super();
    this.addClass('jp-TorchDbg-lrDialog');
    const groups = target.groups;
    const first = groups[0]?.lr ?? null;
    const label = document.createElement('label');
    label.textContent = trans.__('learning rate');
    this.input = document.createElement('input');
    this.input.type = 'text';
    this.input.inputMode = 'decimal';
    this.input.className = 'jp-mod-styled jp-TorchDbg-lrDialogInput';
    this.input.value = first === null ? '' : formatLr(wireNumber(first));
    this.input.setAttribute('aria-label', trans.__('learning rate'));
    label.appendChild(this.input);
    this.node.appendChild(label);
    if (groups.length > 1) {
      const which = document.createElement('label');
      which.textContent = trans.__('param group');
      this.select = document.createElement('select');
      this.select.className = 'jp-mod-styled jp-TorchDbg-lrDialogGroup';
      const all = document.createElement('option');
      all.value = '';
      all.textContent = trans.__('all groups (their ratios kept)');
      this.select.appendChild(all);
      for (const g of groups) {
        const option = document.createElement('option');
        option.value = String(g.index);
        option.textContent = trans.__(
          'group %1 (now %2)',
          String(g.index),
          g.lr === null ? '?' : formatLr(wireNumber(g.lr))
        );
        this.select.appendChild(option);
      }
      which.appendChild(this.select);
      this.node.appendChild(which);
    }
    this.note = document.createElement('div');
    this.note.className = 'jp-TorchDbg-note jp-TorchDbg-lrDialogNote';
    this.note.setAttribute('role', 'alert');
    this.node.appendChild(this.note);
    const check = () => {
      const ok = parseLr(this.input.value) !== null;
      this.input.setAttribute('aria-invalid', ok ? 'false' : 'true');
      this.note.textContent = ok ? '' : lrRule(trans);
    };
    this.input.addEventListener('input', check);
    if (error) {
      this.note.textContent = error;
      this.input.setAttribute('aria-invalid', 'true');
    }
  }

  getValue(): { text: string; group: string } {
    return { text: this.input.value, group: this.select?.value ?? '' };
  }

  readonly input: HTMLInputElement;
  readonly select: HTMLSelectElement | null = null;
  readonly note: HTMLDivElement;
}

/** What a valid learning rate is (the kernel's bounds, `set_lr` in the schema). */
export function lrRule(trans: TranslationBundle): string {
  return trans.__(
    'Enter a number above 0 and at most 1e6 (e.g. 0.001 or 1e-3).'
  );
}

/**
 * Ask for a learning rate for `target` (shown with its current value). An
 * invalid entry is refused with the rule and asked again; resolves to null
 * when cancelled.
 */
export async function askLearningRate(
  target: IControlTarget,
  trans: TranslationBundle
): Promise<ILrChoice | null> {
  let error = '';
  for (;;) {
    const result = await showDialog({
      title: trans.__('Set the learning rate of %1', target.name),
      body: new LrBody(target, error, trans),
      buttons: [
        Dialog.cancelButton(),
        Dialog.okButton({ label: trans.__('Set') })
      ],
      focusNodeSelector: 'input'
    });
    if (!result.button.accept || !result.value) {
      return null;
    }
    const lr = parseLr(result.value.text);
    if (lr === null) {
      error = trans.__(
        '“%1” is not a learning rate. %2',
        result.value.text.slice(0, 40),
        lrRule(trans)
      );
      continue;
    }
    const group = result.value.group === '' ? null : Number(result.value.group);
    return { lr, group };
  }
}
