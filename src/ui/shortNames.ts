/**
 * Names (layers, parameters) shortened for a narrow column so that two names
 * never look the same: `rnn_model.encoder.weight` and `rnn_model.decoder.weight`
 * become `encod…weight` and `decod…weight`, not `rnn_m…` twice (issue #22,
 * item 9). The full name goes in the tooltip; this only picks the label.
 *
 * - Names that fit are shown whole.
 * - Otherwise the dotted prefix every name shares (`rnn_model.`) is left out
 *   (it tells the names apart from nothing), and a name still too long keeps
 *   its head and its tail around an ellipsis, `head…tail`: the split is one
 *   that tells it apart from every other name (its head or its tail differs
 *   from theirs), preferring a tail that starts at a component (`…weight`) and
 *   a head of a few characters.
 * - When no label within the width tells a name apart, it gets the shortest
 *   one that does (wider than asked: the column's own ellipsis then cuts it;
 *   the tooltip still has the name).
 */

/** The ellipsis between a label's head and tail. */
export const ELLIPSIS = '…';

/** What `shortNames` returns: a label per name, and the prefix left out. */
export interface IShortNames {
  /** name -> label (every given name is a key). */
  labels: Map<string, string>;
  /** The dotted prefix left out of every label (`''`: none). */
  prefix: string;
}

/**
 * Labels for `names`: `fits(label)` says whether a label fits the column
 * (a number: at most that many characters).
 */
export function shortNames(
  names: readonly string[],
  fits: number | ((label: string) => boolean)
): IShortNames {
  const fit =
    typeof fits === 'number' ? (label: string) => label.length <= fits : fits;
  const unique = [...new Set(names)];
  const labels = new Map<string, string>();
  if (unique.every(fit)) {
    unique.forEach(n => labels.set(n, n));
    return { labels, prefix: '' };
  }
  const prefix = commonPrefix(unique);
  const cores = unique.map(n => n.slice(prefix.length));
  const shown = cores.map((core, i) =>
    fit(core) ? core : squeeze(core, i, cores, fit)
  );
  // (a name holding the ellipsis itself could look like another's label:
  // then those names are shown whole)
  const seen = new Map<string, number>();
  shown.forEach(l => seen.set(l, (seen.get(l) ?? 0) + 1));
  shown.forEach((label, i) =>
    labels.set(unique[i], (seen.get(label) ?? 0) > 1 ? cores[i] : label)
  );
  return { labels, prefix };
}

/**
 * The dotted prefix (ending in `.`) that every name has and that leaves each
 * name something after it; `''` for fewer than two names.
 */
export function commonPrefix(names: readonly string[]): string {
  if (names.length < 2) {
    return '';
  }
  let prefix = names[0];
  for (const n of names) {
    let k = 0;
    while (k < prefix.length && k < n.length && prefix[k] === n[k]) {
      k++;
    }
    prefix = prefix.slice(0, k);
  }
  // whole components only, and never a whole name
  let cut = prefix.lastIndexOf('.') + 1;
  while (cut > 0 && names.some(n => n.length <= cut)) {
    cut = prefix.lastIndexOf('.', cut - 2) + 1;
  }
  return prefix.slice(0, cut);
}

function commonHead(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let k = 0;
  while (k < n && a[k] === b[k]) {
    k++;
  }
  return k;
}

function commonTail(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let k = 0;
  while (k < n && a[a.length - 1 - k] === b[b.length - 1 - k]) {
    k++;
  }
  return k;
}

/**
 * `core` (too wide) as `head…tail`, told apart from every other core: for a
 * head of h characters, the tail needs more characters than it shares with
 * every other core whose first h characters are the same as its own.
 */
function squeeze(
  core: string,
  index: number,
  cores: readonly string[],
  fit: (label: string) => boolean
): string {
  const len = core.length;
  // needTail[h]: least tail length that tells core apart with a head of h
  const needTail = new Array<number>(len + 1).fill(0);
  cores.forEach((other, j) => {
    if (j === index) {
      return;
    }
    const head = commonHead(core, other);
    // a head of h <= head characters does not tell them apart: the tail must
    // (one character more than they share; a tail of all of `other` is
    // `other` itself and tells them apart only by being shorter)
    const tail = commonTail(core, other) + 1;
    for (let h = 0; h <= Math.min(head, len); h++) {
      if (needTail[h] < tail) {
        needTail[h] = tail;
      }
    }
  });
  const boundary = (t: number) => t > 0 && core[len - t - 1] === '.';
  /** The preferred split of `budget` characters that tells core apart, if any. */
  const split = (budget: number): string | null => {
    let best: { h: number; t: number; score: number } | null = null;
    for (let h = 0; h < budget; h++) {
      const t = budget - 1 - h;
      if (t < needTail[h]) {
        continue;
      }
      const score = (boundary(t) ? 2 : 0) + (h >= 3 ? 1 : 0);
      if (!best || score > best.score || (score === best.score && t > best.t)) {
        best = { h, t, score };
      }
    }
    return best
      ? core.slice(0, best.h) + ELLIPSIS + core.slice(len - best.t)
      : null;
  };
  // the widest label that fits (a budget without a telling split has no
  // smaller one either: fewer splits to choose from)
  for (let budget = len - 1; budget >= 2; budget--) {
    const label = split(budget);
    if (label === null) {
      break;
    }
    if (fit(label)) {
      return label;
    }
  }
  // none fits: the shortest label that tells it apart
  for (let budget = 2; budget < len; budget++) {
    const label = split(budget);
    if (label !== null) {
      return label;
    }
  }
  return core;
}
