import type { TranslationBundle } from '@jupyterlab/translation';
import React, { useEffect, useRef, useState } from 'react';

import { ActionService, outcomeNote } from '../../connection/actions';
import type { TorchDbgConnection } from '../../connection/connection';
import type { IReplayResult } from '../../protocol/generated';

/** A frame's file as the list shows it: the base name (the full path is its title). */
function baseName(file: string): string {
  if (file.startsWith('<')) {
    return file;
  }
  const parts = file.split(/[\\/]/);
  return parts[parts.length - 1] || file;
}

/**
 * What a replay of a non-finite step found (a `non_finite_replay` alert's
 * `replay`): the backward op in bold, or where the forward pass already broke,
 * then the forward stack that made it as `file:line name` over the code line,
 * innermost last. Kernel text is rendered as text only.
 */
export function ReplayView(props: {
  result: IReplayResult;
  trans: TranslationBundle;
  /** Scroll it into view when it appears (a replay the user just asked for). */
  reveal?: boolean;
}): JSX.Element {
  const { result: r, trans, reveal } = props;
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (reveal) {
      box.current?.scrollIntoView({ block: 'nearest' });
    }
  }, []);
  let head: JSX.Element | null = null;
  if (r.backward_op) {
    head = (
      <>
        <strong className="jp-TorchDbg-replayOp">{r.backward_op}</strong>{' '}
        {trans.__('returned NaN/Inf in backward')}
      </>
    );
  } else if (r.cause === 'forward') {
    head = (
      <>
        {trans.__('forward already NaN/Inf at')}{' '}
        <strong className="jp-TorchDbg-replayOp">{r.output ?? '?'}</strong>
        {r.forward_op ? ` (${r.forward_op})` : ''}
      </>
    );
  } else if (r.cause === 'input' || r.cause === 'weights') {
    head = (
      <>
        {r.cause === 'input'
          ? trans.__('the kept batch holds NaN/Inf at')
          : trans.__('the weights hold NaN/Inf at')}{' '}
        <strong className="jp-TorchDbg-replayOp">{r.output ?? '?'}</strong>
      </>
    );
  } else if (r.cause === 'overflow') {
    head = (
      <>
        {trans.__('finite values, but the norm overflows float32 at')}{' '}
        <strong className="jp-TorchDbg-replayOp">{r.output ?? '?'}</strong>
      </>
    );
  } else if (r.finite) {
    // R47: "does not reproduce" only when the replay ran the user's own loss; a kernel
    // without `reproduces` said so only with its own loss, never with the surrogate.
    const checked =
      r.reproduces === false ||
      (r.reproduces === undefined && r.loss_root !== 'surrogate');
    head = checked ? (
      <>{trans.__('finite on replay: the NaN does not reproduce')}</>
    ) : (
      <>
        {trans.__(
          'finite on replay, but your loss was not re-run: not checked whether the NaN reproduces'
        )}
      </>
    );
  }
  const term =
    r.user_loss === 'part' ? trans.__(' (one term of your loss)') : '';
  const facts = [
    r.weights === 'pre-step'
      ? trans.__('pre-step weights')
      : trans.__('current weights (no pre-step copy)'),
    r.loss_root === 'surrogate'
      ? trans.__('backward from the sum of the outputs, not your loss')
      : r.loss_root?.startsWith('loss_module:')
        ? trans.__('loss: %1', r.loss_root.slice('loss_module:'.length)) + term
        : r.loss_root === 'model'
          ? trans.__("the model's own loss") + term
          : null,
    r.user_loss === 'unseen'
      ? trans.__('what backward() was called on was not seen')
      : null
  ].filter(Boolean);
  return (
    <div className="jp-TorchDbg-replay" data-cause={r.cause} ref={box}>
      {head && <div className="jp-TorchDbg-replayHead">{head}</div>}
      <div className="jp-TorchDbg-replayFacts">{facts.join(' · ')}</div>
      {r.forward_stack.length > 0 && (
        <ol
          className="jp-TorchDbg-replayStack"
          aria-label={trans.__('Forward call that made it (innermost last)')}
        >
          {r.forward_stack.map((f, i) => (
            <li key={i} title={`${f.file}:${f.line}`}>
              <span className="jp-TorchDbg-replayWhere">
                {baseName(f.file)}:{f.line}{' '}
                <span className="jp-TorchDbg-replayName">{f.name}</span>
              </span>
              {f.code && (
                <code className="jp-TorchDbg-replayCode">{f.code}</code>
              )}
            </li>
          ))}
        </ol>
      )}
    </div>
  );
}

/**
 * "Replay with anomaly detection" on a non-finite alert whose step the kernel
 * kept (`grads.replayable`). Busy while the kernel replays (at the next step
 * boundary while a cell trains); the result arrives as a `non_finite_replay`
 * alert in this list, a refusal is shown beside the button.
 */
export function ReplayButton(props: {
  conn: TorchDbgConnection;
  track: string;
  trans: TranslationBundle;
}): JSX.Element {
  const { conn, track, trans } = props;
  const [busy, setBusy] = useState(false);
  const [note, setNote] = useState('');
  const mounted = useRef(true);
  useEffect(() => {
    mounted.current = true;
    return () => {
      mounted.current = false;
    };
  }, []);
  const done = (text: string) => {
    if (mounted.current) {
      setBusy(false);
      setNote(text);
    }
  };
  const replay = () => {
    setBusy(true);
    setNote('');
    void ActionService.of(conn)
      .send('replay_step', { track })
      .then(outcome => done(outcomeNote(outcome)));
  };
  return (
    <span className="jp-TorchDbg-replayAction">
      <button
        className="jp-Button jp-mod-styled jp-mod-accept jp-TorchDbg-small"
        disabled={busy}
        aria-busy={busy}
        title={trans.__(
          'Run this step once more under torch.autograd.detect_anomaly, on the weights before it; the model is not changed'
        )}
        onClick={replay}
      >
        {busy
          ? trans.__('Replaying…')
          : trans.__('Replay with anomaly detection')}
      </button>
      {note && <span className="jp-TorchDbg-replayNote">{note}</span>}
    </span>
  );
}
