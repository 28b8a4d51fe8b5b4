import { ISignal, Signal } from '@lumino/signaling';

import {
  IAlert,
  IAlertItem,
  IGradLayer,
  IGrads,
  IGradTrack
} from '../../protocol/messages';
import { MAX_RUNS as MAX_RUNS_KEPT, NO_RUN } from '../runs/model';

/** Alerts kept in the browser per run (newest last). */
const MAX_ALERTS = 200;

/** The run of a track or alert (0: a kernel without runs, or outside any run). */
function runOf(item: { run?: number }): number {
  return item.run ?? NO_RUN;
}

/**
 * The gradient monitor's state as the panel knows it: the latest status
 * message, each optimizer's layer list (sent only when it changes) and the
 * alarms, kept per run. `status` and `alerts` are those of the shown run
 * (`shownRun`, set by the kernel model), so the panels show one run at a
 * time: a new run's track replaces the old one. The norms themselves live in
 * the kernel model's series rings.
 */
export class GradsModel {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** New alarms; `replay` is true for ones re-sent in a snapshot (no pop-up). */
  get alerted(): ISignal<this, { alerts: IAlertItem[]; replay: boolean }> {
    return this._alerted;
  }

  /**
   * The latest status, with `tracks` those of the shown run: the kernel's
   * list while it is the current run, else the tracks kept from when it ran.
   */
  get status(): IGrads | null {
    const status = this._status;
    if (!status) {
      return null;
    }
    if (!this._statusView) {
      const shown = this._shownRun;
      let tracks = status.tracks.filter(t => runOf(t) === shown);
      if (tracks.length === 0) {
        tracks = [...(this._tracks.get(shown)?.values() ?? [])];
      }
      if (tracks.length === 0 && shown === NO_RUN) {
        tracks = status.tracks; // no run known yet: show what the kernel lists
      }
      this._statusView =
        tracks.length === status.tracks.length &&
        tracks.every((t, i) => t === status.tracks[i])
          ? status
          : { ...status, tracks };
    }
    return this._statusView;
  }

  /** The run whose tracks and alarms are shown (0: a kernel without runs). */
  get shownRun(): number {
    return this._shownRun;
  }

  set shownRun(run: number) {
    if (run === this._shownRun) {
      return;
    }
    this._shownRun = run;
    this._statusView = null;
    this._focusStep = null;
    this._changed.emit();
  }

  /** The shown run's alarms, oldest first. */
  get alerts(): readonly IAlertItem[] {
    return this.alertsOf(this._shownRun);
  }

  /** Every alarm kept, of every run, oldest first. */
  get allAlerts(): readonly IAlertItem[] {
    return [...this._alerts.values()].flat().sort((a, b) => a.time - b.time);
  }

  /** One run's alarms, oldest first. */
  alertsOf(run: number): readonly IAlertItem[] {
    return this._alerts.get(run) ?? [];
  }

  /** Alarm counts by run (runs without alarms left out). */
  counts(): Map<number, number> {
    const out = new Map<number, number>();
    for (const [run, list] of this._alerts) {
      if (list.length) {
        out.set(run, list.length);
      }
    }
    return out;
  }

  /** The tracks kept for one run (the latest status of each). */
  tracksOf(run: number): IGradTrack[] {
    return [...(this._tracks.get(run)?.values() ?? [])];
  }

  /** The step (within the shown run) a user picked from an alarm to mark on the charts. */
  get focusStep(): number | null {
    return this._focusStep;
  }

  set focusStep(step: number | null) {
    this._focusStep = step;
    this._changed.emit();
  }

  layers(track: IGradTrack): IGradLayer[] {
    return (
      this._runLayers.get(`${runOf(track)}/${track.name}`) ??
      this._layers.get(track.name) ??
      []
    );
  }

  apply(msg: IGrads): void {
    for (const track of msg.tracks) {
      const run = runOf(track);
      if (track.layers) {
        this._layers.set(track.name, track.layers);
        this._runLayers.set(`${run}/${track.name}`, track.layers);
      }
      let tracks = this._tracks.get(run);
      if (!tracks) {
        tracks = new Map();
        this._tracks.set(run, tracks);
        this._forgetOldRuns();
      }
      tracks.set(track.name, track);
    }
    this._status = msg;
    this._statusView = null;
    this._changed.emit();
  }

  applyAlert(msg: IAlert): void {
    const fresh = msg.alerts.filter(a => !this._ids.has(a.id));
    for (const a of fresh) {
      this._ids.add(a.id);
      const run = runOf(a);
      let list = this._alerts.get(run);
      if (!list) {
        list = [];
        this._alerts.set(run, list);
      }
      list.push(a);
      while (list.length > MAX_ALERTS) {
        const dropped = list.shift();
        if (dropped) {
          this._ids.delete(dropped.id);
        }
      }
    }
    if (fresh.length) {
      this._forgetOldRuns();
      this._alerted.emit({ alerts: fresh, replay: !!msg.replay });
      this._changed.emit();
    }
  }

  clearAlerts(): void {
    this._alerts.clear();
    this._ids.clear();
    this._changed.emit();
  }

  reset(): void {
    this._status = null;
    this._statusView = null;
    this._layers.clear();
    this._runLayers.clear();
    this._tracks.clear();
    this._alerts.clear();
    this._ids.clear();
    this._focusStep = null;
    this._changed.emit();
  }

  /** Keep the tracks and alarms of the last few runs only (as the series). */
  private _forgetOldRuns(): void {
    const runs = new Set([...this._tracks.keys(), ...this._alerts.keys()]);
    const old = [...runs]
      .filter(r => r !== NO_RUN)
      .sort((a, b) => a - b)
      .slice(0, -MAX_RUNS_KEPT);
    for (const run of old) {
      this._tracks.delete(run);
      for (const a of this._alerts.get(run) ?? []) {
        this._ids.delete(a.id);
      }
      this._alerts.delete(run);
      for (const key of [...this._runLayers.keys()]) {
        if (key.startsWith(`${run}/`)) {
          this._runLayers.delete(key);
        }
      }
    }
  }

  private _status: IGrads | null = null;
  private _statusView: IGrads | null = null;
  private _shownRun = NO_RUN;
  private _layers = new Map<string, IGradLayer[]>();
  private _runLayers = new Map<string, IGradLayer[]>();
  private _tracks = new Map<number, Map<string, IGradTrack>>();
  private _alerts = new Map<number, IAlertItem[]>();
  private _ids = new Set<string>();
  private _focusStep: number | null = null;
  private _changed = new Signal<this, void>(this);
  private _alerted = new Signal<
    this,
    { alerts: IAlertItem[]; replay: boolean }
  >(this);
}
