import { ActionOutcome, ActionService } from '../connection/actions';
import type { TorchDbgConnection } from '../connection/connection';
import type { ActionName, IGradThresholds } from '../protocol/messages';

/** How often the gradient monitor samples (the `gradientSampling` setting). */
export type GradSampling = 'auto' | 'every step' | 'off';

/** The user's gradient settings (Settings Editor → Torch Debugger). */
export interface IGradSettings {
  sampling: GradSampling;
  /** Only the thresholds the user set; the kernel keeps its defaults for the rest. */
  thresholds: Partial<IGradThresholds>;
}

export const DEFAULT_GRAD_SETTINGS: IGradSettings = {
  sampling: 'auto',
  thresholds: {}
};

/**
 * Applies the user's gradient settings to every kernel the panel connects to:
 * once per kernel session (a restart starts the kernel side afresh with its
 * defaults), and to every connected kernel when the settings change. Goes
 * through the same allowlisted actions as the panel (`set_thresholds`,
 * `set_stride`), so the kernel validates them (R14); a refusal is reported
 * with the kernel's own message, never thrown.
 */
export class GradSettingsSync {
  constructor(onError: (message: string) => void) {
    this._onError = onError;
  }

  get settings(): IGradSettings {
    return this._settings;
  }

  /** New settings: pushed now to every connected kernel among `connections`. */
  update(settings: IGradSettings, connections: TorchDbgConnection[]): void {
    const before = JSON.stringify(this._settings);
    if (settings.sampling !== this._settings.sampling) {
      this._samplingSet = true;
    }
    this._settings = settings;
    for (const conn of connections) {
      this.track(conn);
    }
    if (JSON.stringify(settings) === before) {
      return;
    }
    for (const conn of connections) {
      if (conn.isConnected) {
        this._push(conn);
      }
    }
  }

  /** Follow a connection: push on each new kernel session it connects to. */
  track(conn: TorchDbgConnection): void {
    if (this._tracked.has(conn)) {
      return;
    }
    this._tracked.add(conn);
    conn.model.stateChanged.connect((_, state) => {
      if (
        state.kind === 'connected' &&
        this._pushedTo.get(conn) !== conn.model.hello?.session_id
      ) {
        this._push(conn);
      }
    });
    if (conn.isConnected) {
      this._push(conn);
    }
  }

  private _push(conn: TorchDbgConnection): void {
    this._pushedTo.set(conn, conn.model.hello?.session_id);
    const { sampling, thresholds } = this._settings;
    const actions = ActionService.of(conn);
    // not sent (disconnected meanwhile): pushed again on reconnect
    const report = (what: string) => (outcome: ActionOutcome<ActionName>) => {
      if (!outcome.ok && outcome.code !== 'unsent') {
        this._onError(`Torch Debugger settings (${what}): ${outcome.error}`);
      }
    };
    if (Object.keys(thresholds).length > 0) {
      void actions
        .send('set_thresholds', thresholds)
        .then(report('gradientThresholds'));
    }
    // 'auto' is the kernel's default: only sent once the user changed the setting,
    // so a `watch(model, stride=N)` in the notebook is not overridden on connect.
    if (sampling !== 'auto' || this._samplingSet) {
      const stride = sampling === 'every step' ? 1 : sampling;
      void actions
        .send('set_stride', { stride })
        .then(report('gradientSampling'));
    }
  }

  private _onError: (message: string) => void;
  private _settings: IGradSettings = DEFAULT_GRAD_SETTINGS;
  private _samplingSet = false;
  private _tracked = new WeakSet<TorchDbgConnection>();
  private _pushedTo = new WeakMap<TorchDbgConnection, string | undefined>();
}
