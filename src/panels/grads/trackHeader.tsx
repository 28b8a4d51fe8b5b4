import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { IGradTrack } from '../../protocol/messages';

function pct(v: number | null): string {
  return v === null ? '–' : `${(v * 100).toFixed(v < 0.01 ? 2 : 1)}%`;
}

/**
 * A gradient track's header: its name, where its norms are read (the end of
 * backward for a model without an optimizer step), the step, how often it is
 * sampled and why (the kernel's words, the periodic work's cost in the
 * tooltip), what it costs, and one line of facts (non-finite or GradScaler
 * steps skipped, local shard norms, why the track is not read).
 */
export function TrackHeader(props: {
  track: IGradTrack;
  /** The newest step, from the stream (fresher than the 2 s status). */
  liveStep: number;
  trans: TranslationBundle;
}): JSX.Element {
  const { track, liveStep, trans } = props;
  const why: Record<string, string> = {
    warmup: trans.__('every step (auto: first steps of the run)'),
    rising: trans.__('every step (auto: norm climbing)'),
    clip: trans.__('every step (clipping reads it anyway)'),
    skip: trans.__('every step (skipping non-finite steps)')
  };
  const stride =
    track.mode === 'off' && track.every_step !== 'skip'
      ? trans.__('off')
      : track.every_step
        ? why[track.every_step]
        : track.stride === 1
          ? track.mode === 'auto'
            ? trans.__('every step (auto)')
            : trans.__('every step')
          : track.mode === 'auto'
            ? trans.__('1 in %1 steps (auto)', String(track.stride))
            : trans.__('1 in %1 steps', String(track.stride));
  // Why the stride is what it is (the kernel's words), with the periodic work's cost —
  // paid apart from the read, by flushing less often — in the tooltip.
  const samplingTip = [
    track.stride_reason ?? '',
    track.periodic_cost_s !== null && track.periodic_cost_s !== undefined
      ? trans.__(
          'periodic work (flush, alarms, status): %1 ms a pass, %2 of wall time, flushing every %3 s',
          (track.periodic_cost_s * 1e3).toFixed(2),
          pct(track.periodic_share ?? null),
          (track.flush_interval_s ?? 0).toFixed(2)
        )
      : '',
    track.param_cost_s !== null && track.param_cost_s !== undefined
      ? trans.__(
          'weight norms: %1 ms a read',
          (track.param_cost_s * 1e3).toFixed(2)
        )
      : ''
  ]
    .filter(s => s)
    .join('\n');
  // Facts about this track, one line, separated by dots (none: no line).
  const notes: { key: string; text: string; className?: string }[] = [];
  if ((track.skipped_nonfinite ?? 0) > 0) {
    notes.push({
      key: 'nonfinite',
      className: 'jp-TorchDbg-skippedNonfinite',
      text: trans.__(
        '%1 non-finite steps skipped (weights kept finite)',
        String(track.skipped_nonfinite)
      )
    });
  }
  if (track.skipped_steps > 0) {
    notes.push({
      key: 'amp',
      text: trans.__(
        '%1 skipped steps (GradScaler)',
        String(track.skipped_steps)
      )
    });
  }
  if (track.local_shard) {
    notes.push({
      key: 'shard',
      text: trans.__('norms of the local shard only')
    });
  }
  if (track.reason) {
    notes.push({ key: 'reason', text: track.reason });
  }
  return (
    <>
      <div className="jp-TorchDbg-trackHeader">
        <span className="jp-TorchDbg-trackName">{track.name}</span>
        {track.boundary === 'end_of_backward' && (
          <span
            className="jp-TorchDbg-chip jp-TorchDbg-boundary"
            title={trans.__(
              'No optimizer step is seen for this model (its weights are updated by hand): its gradients are read at the end of each backward pass. Clip and pause apply there; learning-rate scaling does not.'
            )}
          >
            {trans.__('end of backward')}
          </span>
        )}
        <span className="jp-TorchDbg-trackMeta" title={samplingTip}>
          {trans.__(
            'step %1 · sampled %2 · overhead %3',
            String(liveStep),
            stride,
            pct(track.overhead)
          )}
        </span>
      </div>
      {track.stride_reason && (
        <div
          className="jp-TorchDbg-trackNotes jp-TorchDbg-strideReason"
          title={samplingTip}
        >
          {track.stride_reason}
        </div>
      )}
      {notes.length > 0 && (
        <div className="jp-TorchDbg-trackNotes">
          {notes.map((note, i) => (
            <React.Fragment key={note.key}>
              {i > 0 && ' · '}
              <span className={note.className}>{note.text}</span>
            </React.Fragment>
          ))}
        </div>
      )}
    </>
  );
}
