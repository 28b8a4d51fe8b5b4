import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

/** A typed max norm, or null unless a finite number above 0. */
export function parseMaxNorm(text: string): number | null {
  const v = Number(text);
  return text.trim() !== '' && Number.isFinite(v) && v > 0 ? v : null;
}

/**
 * The "max norm" field of a clip control (the control panel's and the ranks
 * panel's): a number input, marked invalid unless `parseMaxNorm` reads it.
 */
export function MaxNormInput(props: {
  value: string;
  onChange: (text: string) => void;
  trans: TranslationBundle;
  /** Extra class names after `jp-TorchDbg-clipInput`. */
  className?: string;
  ariaLabel?: string;
}): JSX.Element {
  const { value, onChange, trans } = props;
  return (
    <label className="jp-TorchDbg-clipLabel">
      {trans.__('max norm')}{' '}
      <input
        className={
          props.className
            ? `jp-TorchDbg-clipInput ${props.className}`
            : 'jp-TorchDbg-clipInput'
        }
        type="number"
        min="0"
        step="0.1"
        value={value}
        aria-invalid={parseMaxNorm(value) === null}
        aria-label={props.ariaLabel}
        onChange={e => onChange(e.currentTarget.value)}
      />
    </label>
  );
}

/**
 * A small action button of the control and ranks panels: `accept` for what
 * starts something (clip, resume), `reject` for what holds or undoes it.
 */
export function ActionButton(props: {
  kind: 'accept' | 'reject';
  label: string;
  disabled: boolean;
  title?: string;
  /** Extra class names after the button's own. */
  className?: string;
  onClick: () => void;
}): JSX.Element {
  const base = `jp-Button jp-mod-styled jp-mod-${props.kind} jp-TorchDbg-small`;
  return (
    <button
      className={props.className ? `${base} ${props.className}` : base}
      disabled={props.disabled}
      title={props.title || undefined}
      onClick={props.onClick}
    >
      {props.label}
    </button>
  );
}
