import type { TranslationBundle } from '@jupyterlab/translation';

import { IException } from '../../protocol/messages';

/**
 * What to type once `%debug` runs: ipdb starts in the innermost frame of this
 * kernel's stack, so say how many `u` lead to the user's own frame. Frames of
 * another process (a DataLoader worker's, known from its traceback text) are
 * not on that stack: say so instead of counting them.
 */
export function debugNote(exc: IException, trans: TranslationBundle): string {
  const elsewhere = exc.frames.find(f => f.process)?.process;
  const here = exc.frames.filter(f => !f.process);
  const chosen = exc.frames[exc.focus ?? -1];
  const focus =
    chosen && !chosen.process ? chosen : [...here].reverse().find(f => f.user);
  const total = elsewhere
    ? (here[here.length - 1]?.position ?? -1) + 1
    : exc.frames_total;
  const where = elsewhere
    ? trans.__(
        'The failing frame ran in %1: %debug cannot reach it.',
        elsewhere
      )
    : '';
  const up = focus ? total - 1 - focus.position : 0;
  if (!focus || up <= 0) {
    return where;
  }
  const note = trans.__(
    'ipdb starts in the innermost frame: type u %1 to reach %2 (%3, line %4).',
    String(up),
    focus.function,
    focus.file,
    String(focus.lineno)
  );
  return where ? `${note} ${where}` : note;
}
