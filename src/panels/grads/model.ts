import { ISignal, Signal } from '@lumino/signaling';

import {
  IAlert,
  IAlertItem,
  IGradLayer,
  IGrads,
  IGradTrack
} from '../../protocol/messages';

/** Alerts kept in the browser (newest last). */
const MAX_ALERTS = 200;

/**
 * The gradient monitor's state as the panel knows it: the latest status
 * message, each optimizer's layer list (sent only when it changes) and the
 * alarms. The norms themselves live in the kernel model's series rings.
 */
export class GradsModel {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** New alarms; `replay` is true for ones re-sent in a snapshot (no pop-up). */
  get alerted(): ISignal<this, { alerts: IAlertItem[]; replay: boolean }> {
    return this._alerted;
  }

  get status(): IGrads | null {
    return this._status;
  }

  get alerts(): readonly IAlertItem[] {
    return this._alerts;
  }

  /** The step a user picked (from an alarm) to mark on the charts. */
  get focusStep(): number | null {
    return this._focusStep;
  }

  set focusStep(step: number | null) {
    this._focusStep = step;
    this._changed.emit();
  }

  layers(track: IGradTrack): IGradLayer[] {
    return this._layers.get(track.name) ?? [];
  }

  apply(msg: IGrads): void {
    for (const track of msg.tracks) {
      if (track.layers) {
        this._layers.set(track.name, track.layers);
      }
    }
    this._status = msg;
    this._changed.emit();
  }

  applyAlert(msg: IAlert): void {
    const fresh = msg.alerts.filter(a => !this._ids.has(a.id));
    for (const a of fresh) {
      this._ids.add(a.id);
      this._alerts.push(a);
    }
    while (this._alerts.length > MAX_ALERTS) {
      const dropped = this._alerts.shift();
      if (dropped) {
        this._ids.delete(dropped.id);
      }
    }
    if (fresh.length) {
      this._alerted.emit({ alerts: fresh, replay: !!msg.replay });
      this._changed.emit();
    }
  }

  clearAlerts(): void {
    this._alerts = [];
    this._ids.clear();
    this._changed.emit();
  }

  reset(): void {
    this._status = null;
    this._layers.clear();
    this._alerts = [];
    this._ids.clear();
    this._focusStep = null;
    this._changed.emit();
  }

  private _status: IGrads | null = null;
  private _layers = new Map<string, IGradLayer[]>();
  private _alerts: IAlertItem[] = [];
  private _ids = new Set<string>();
  private _focusStep: number | null = null;
  private _changed = new Signal<this, void>(this);
  private _alerted = new Signal<
    this,
    { alerts: IAlertItem[]; replay: boolean }
  >(this);
}
