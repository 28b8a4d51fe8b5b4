import { formatBytes } from '../memory/format';
import { RankTrouble } from './model';
import type { IRankState } from '../../protocol/generated';
import type { TranslationBundle } from '@jupyterlab/translation';

/** A step time for a narrow column: "840 µs", "12.5 ms", "1.25 s", "—" when unknown. */
export function formatSeconds(s: number | null | undefined): string {
  if (s === null || s === undefined || !Number.isFinite(s)) {
    return '—';
  }
  const a = Math.abs(s);
  const three = (v: number) => String(Number(v.toPrecision(3)));
  if (a === 0) {
    return '0 s';
  }
  if (a < 1e-3) {
    return `${three(s * 1e6)} µs`;
  }
  if (a < 1) {
    return `${three(s * 1e3)} ms`;
  }
  if (a < 600) {
    return `${three(s)} s`;
  }
  return `${three(s / 60)} min`;
}

/** Memory in MiB / GiB ("—" when unknown). */
export function formatMemory(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined || !Number.isFinite(bytes)
    ? '—'
    : formatBytes(bytes);
}

/** A rank's state as a short word (the badge) and a sentence (its tooltip). */
export function stateLabel(
  state: IRankState['state'],
  trans: TranslationBundle
): { text: string; title: string } {
  switch (state) {
    case 'starting':
      return {
        text: trans.__('starting'),
        title: trans.__('Attached; no optimizer step yet.')
      };
    case 'running':
      return { text: trans.__('running'), title: trans.__('Stepping.') };
    case 'waiting':
      return {
        text: trans.__('waiting'),
        title: trans.__(
          'Inside a torch collective or backward: waiting for the other ranks.'
        )
      };
    case 'paused':
      return {
        text: trans.__('paused'),
        title: trans.__('Held before its next optimizer step by Pause all.')
      };
    case 'stalled':
      return {
        text: trans.__('stalled'),
        title: trans.__(
          'No step for the hang threshold while not waiting in torch: stuck in its own code.'
        )
      };
    case 'exited':
      return {
        text: trans.__('exited'),
        title: trans.__('The process ended normally.')
      };
    case 'failed':
      return {
        text: trans.__('failed'),
        title: trans.__('The process raised an exception.')
      };
    case 'lost':
      return {
        text: trans.__('lost'),
        title: trans.__('No message from this rank for 10 s.')
      };
  }
}

/** Why a rank is highlighted, as a short tag (null: nothing beyond its state badge). */
export function troubleLabel(
  trouble: RankTrouble,
  trans: TranslationBundle
): string | null {
  switch (trouble) {
    case 'hang':
      return trans.__('hang');
    case 'desync':
      return trans.__('desync');
    case 'straggler':
      return trans.__('straggler');
    case 'non_finite':
      return trans.__('NaN began here');
    case 'explosion':
      return trans.__('explosion');
    case 'vanishing':
      return trans.__('vanishing');
    default:
      return null; // failed / lost / stalled: the state badge says it
  }
}
