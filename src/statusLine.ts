import type { TranslationBundle } from '@jupyterlab/translation';

import type { TorchDbgModel } from './model/model';
import { nowFigures } from './sidebar/nowStrip';

/**
 * The status bar's line for a connected kernel: the same figures as the Now
 * strip (sidebar/nowStrip.tsx), as fresh: "Torch: step 120 · clip 1 · 2 alarms",
 * "Torch: 2 ranks · step 38 · 1 alarm", "Torch: paused at step 40",
 * "Torch: not training". `idle`: nothing trains.
 */
export function statusLine(
  model: TorchDbgModel,
  trans: TranslationBundle
): { text: string; idle: boolean } {
  const c = model.control.state;
  const f = nowFigures(model);
  // the kernel idle while a distributed job runs: the job's figures
  const job = f.idle ? f.ranks : null;
  // (before the kernel's first control message: not training until a step says so)
  const idle = job === null && (f.idle || (c === null && f.step === null));
  const parts: string[] = [];
  if (c?.paused && c.paused_at !== null) {
    parts.push(trans.__('paused at step %1', String(c.paused_at)));
  } else if (job) {
    parts.push(
      trans.__('%1 ranks · step %2', String(job.size), String(job.step))
    );
  } else if (idle) {
    parts.push(trans.__('not training'));
  } else {
    parts.push(trans.__('step %1', String(f.step ?? 0)));
  }
  if (c?.clip !== null && c?.clip !== undefined) {
    parts.push(trans.__('clip %1', String(c.clip)));
  }
  if (c?.lr_scale !== null && c?.lr_scale !== undefined) {
    parts.push(trans.__('LR ×%1', String(c.lr_scale)));
  }
  const alerts = (job ? 0 : f.alarms) + (f.ranks?.alarms ?? 0);
  if (alerts) {
    parts.push(
      alerts === 1 ? trans.__('1 alarm') : trans.__('%1 alarms', String(alerts))
    );
  }
  return { text: trans.__('Torch: %1', parts.join(' · ')), idle };
}
