import { ISignal, Signal } from '@lumino/signaling';

import type {
  IRankAlarm,
  IRankJob,
  IRankPoints,
  IRankState,
  IRanks
} from '../../protocol/generated';
import { wireNumber } from '../../protocol/messages';

/** Who a rank is (host, pid, local rank...). */
export type RankIdentity = NonNullable<IRankState['identity']>;

/**
 * One rank now, with its identity: a `ranks` broadcast above 16 ranks leaves
 * out the identities the panel has (protocol 2.8); the model keeps them.
 */
export type RankNow = IRankState & { identity: RankIdentity };

/** Points kept per rank in the browser (the kernel keeps the last 2,000). */
export const RANK_POINTS = 20_000;

/** The per-step points of one rank, oldest first (non-finite and missing values as NaN). */
export interface IRankSeries {
  rank: number;
  steps: number[];
  stepTime: number[];
  gradNorm: number[];
  memory: number[];
}

/** Which all-rank actions the panel sends (the `ranks_*` actions of protocol 2.4). */
export type RanksActionName =
  | 'ranks_clip'
  | 'ranks_unclip'
  | 'ranks_pause'
  | 'ranks_resume'
  | 'ranks_scale_lr';

/** What the last all-rank action came to: its ack, a refusal, or sent and waiting. */
export interface IRanksNote {
  kind: 'ack' | 'refused' | 'sending';
  action: RanksActionName;
  text: string;
}

/** Why a rank stands out in the grid, or null. */
export type RankTrouble =
  | 'failed'
  | 'lost'
  | 'stalled'
  | 'hang'
  | 'desync'
  | 'straggler'
  | 'non_finite'
  | 'explosion'
  | 'vanishing'
  | null;

/** Causes of a non-finite gradient that a rank's own data made. */
const OWN_CAUSES = new Set(['input', 'forward', 'loss']);

/**
 * Whether a gradient alarm singles its rank out: a NaN that began in that
 * rank's own batch, forward or loss, or an explosion / vanishing seen on that
 * rank alone (under DDP every rank sees the same all-reduced norm: no one rank
 * is to blame).
 */
function singlesOut(a: IRankAlarm): boolean {
  if (a.kind === 'non_finite') {
    return a.cause !== undefined && OWN_CAUSES.has(a.cause);
  }
  if (a.kind === 'explosion' || a.kind === 'vanishing') {
    return a.ranks !== undefined && a.ranks.length === 1;
  }
  return a.kind === 'hang' || a.kind === 'desync' || a.kind === 'straggler';
}

/** Rank states that mean the process is gone. */
const ENDED_STATES = new Set<IRankState['state']>(['exited', 'failed', 'lost']);

/**
 * The worker processes (ranks) of the last torch.distributed job that attached
 * to this kernel, as the kernel's `ranks` messages report them: the job, every
 * rank now, their per-step points, and the job's alarms. Pure data with a
 * signal; no DOM.
 */
export class RanksModel {
  /** Emitted when anything changed (at most once per `ranks` message). */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The current (or last) job; null before any worker attached. */
  get job(): IRankJob | null {
    return this._job;
  }

  /** Every rank now, by rank number. */
  get ranks(): readonly RankNow[] {
    return this._ranks;
  }

  /** The job's alarms, oldest first: the first is the root cause, the last the latest. */
  get alarms(): readonly IRankAlarm[] {
    return this._alarms;
  }

  /** How workers reach the kernel, and how many messages it refused (bad key). */
  get endpoint(): IRanks['endpoint'] | null {
    return this._endpoint;
  }

  /** Whether the job has ended (every rank exited, failed or was lost). */
  get ended(): boolean {
    return this._job?.state === 'ended';
  }

  /** Ranks held by an all-rank pause (or whose phase says so). */
  get pausedRanks(): number[] {
    return this._ranks
      .filter(r => r.state === 'paused' || r.phase === 'paused')
      .map(r => r.identity.rank);
  }

  /** Ranks still attached (not exited, failed or lost). */
  get liveRanks(): number[] {
    return this._ranks
      .filter(r => !ENDED_STATES.has(r.state))
      .map(r => r.identity.rank);
  }

  /** max_norm of the all-rank clip when every live rank clips at it, else null. */
  get clip(): number | null {
    const live = this._ranks.filter(r => !ENDED_STATES.has(r.state));
    const first = live[0]?.clip ?? null;
    return first !== null && live.every(r => r.clip === first) ? first : null;
  }

  /** The LR scale of the ranks (the largest if they differ; 1 when none). */
  get lrScale(): number {
    return this._ranks.reduce(
      (m, r) => (Math.abs(r.lr_scale - 1) > Math.abs(m - 1) ? r.lr_scale : m),
      1
    );
  }

  /** Bumped whenever points changed (the charts redraw on a new value). */
  get version(): number {
    return this._version;
  }

  /** The kept points of every rank that has some, by rank number. */
  get series(): readonly IRankSeries[] {
    return [...this._series.values()].sort((a, b) => a.rank - b.rank);
  }

  /** The kept points of one rank, if any. */
  seriesOf(rank: number): IRankSeries | undefined {
    return this._series.get(rank);
  }

  /** The last all-rank action's outcome, shown under the buttons. */
  get note(): IRanksNote | null {
    return this._note;
  }

  set note(value: IRanksNote | null) {
    this._note = value;
    this._changed.emit();
  }

  /** Why `rank` stands out: its own state first, then its newest alarm. */
  trouble(rank: number): RankTrouble {
    const state = this._ranks.find(r => r.identity.rank === rank)?.state;
    if (state === 'failed' || state === 'lost' || state === 'stalled') {
      return state;
    }
    for (let i = this._alarms.length - 1; i >= 0; i--) {
      const a = this._alarms[i];
      if (a.rank === rank && singlesOut(a)) {
        return a.kind as RankTrouble;
      }
    }
    return null;
  }

  /**
   * Apply a `ranks` message: the job, states and alarms replace the held ones;
   * `points` replace the held points when `replay` (or when a new job began),
   * else are appended to them. A rank without its identity (a broadcast above
   * 16 ranks sends it once) gets the one kept from an earlier message; returns
   * false when one had none kept (the panel missed it: ask for the snapshot,
   * whose `ranks` message has them all), true otherwise.
   */
  apply(msg: IRanks): boolean {
    const newJob =
      msg.job !== null && this._job !== null && msg.job.id !== this._job.id;
    if (msg.replay || newJob || msg.job === null) {
      this._series.clear();
      this._identities.clear();
    }
    // a new job, or this one just ended: the last action's outcome is stale
    const ended = msg.job?.state === 'ended' && this._job?.state === 'running';
    if (newJob || msg.job === null || ended) {
      this._note = null;
    }
    this._job = msg.job;
    let complete = true;
    this._ranks = msg.ranks
      .map(r => {
        const number = r.rank ?? r.identity?.rank ?? 0;
        let identity = r.identity;
        if (identity) {
          this._identities.set(number, identity);
        } else {
          identity = this._identities.get(number);
          if (!identity) {
            complete = false;
            identity = {
              rank: number,
              world_size: msg.job?.world_size ?? 1,
              local_rank: null,
              host: '',
              pid: 0,
              launcher: 'attach'
            };
          }
        }
        return { ...r, rank: number, identity };
      })
      .sort((a, b) => a.identity.rank - b.identity.rank);
    // oldest first, as sent; a stable sort by time keeps the sender's order on ties
    this._alarms = [...msg.alarms].sort((a, b) => a.time - b.time);
    this._endpoint = msg.endpoint;
    for (const p of msg.points) {
      this._append(p);
    }
    if (msg.replay || msg.points.length > 0 || newJob) {
      this._version++;
    }
    this._changed.emit();
    return complete;
  }

  /** Forget everything (kernel restarted or changed). */
  reset(): void {
    this._job = null;
    this._ranks = [];
    this._identities.clear();
    this._alarms = [];
    this._endpoint = null;
    this._series.clear();
    this._note = null;
    this._version++;
    this._changed.emit();
  }

  private _append(p: IRankPoints): void {
    let s = this._series.get(p.rank);
    if (!s) {
      s = { rank: p.rank, steps: [], stepTime: [], gradNorm: [], memory: [] };
      this._series.set(p.rank, s);
    }
    const n = Math.min(
      p.steps.length,
      p.step_time_s.length,
      p.grad_norm.length,
      p.memory_bytes.length
    );
    for (let i = 0; i < n; i++) {
      const step = p.steps[i];
      // a point the rank already sent (a resent batch) is not drawn twice
      if (s.steps.length && step <= s.steps[s.steps.length - 1]) {
        continue;
      }
      s.steps.push(step);
      s.stepTime.push(p.step_time_s[i] ?? NaN);
      s.gradNorm.push(
        p.grad_norm[i] === null ? NaN : wireNumber(p.grad_norm[i])
      );
      s.memory.push(p.memory_bytes[i] ?? NaN);
    }
    const over = s.steps.length - RANK_POINTS;
    if (over > 0) {
      s.steps.splice(0, over);
      s.stepTime.splice(0, over);
      s.gradNorm.splice(0, over);
      s.memory.splice(0, over);
    }
  }

  private _job: IRankJob | null = null;
  private _ranks: RankNow[] = [];
  /** Each rank's identity as last sent (a broadcast leaves out the known ones). */
  private _identities = new Map<number, RankIdentity>();
  private _alarms: IRankAlarm[] = [];
  private _endpoint: IRanks['endpoint'] | null = null;
  private _series = new Map<number, IRankSeries>();
  private _note: IRanksNote | null = null;
  private _version = 0;
  private _changed = new Signal<this, void>(this);
}
