import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import type { TorchDbgModel } from '../model/model';
import { formatBytes } from '../panels/memory/format';
import { isMonitorSeries } from '../panels/series/body';
import { IGradTrack, wireNumber } from '../protocol/messages';
import { formatCompact } from '../ui/formatCompact';
import { useLiveTick } from '../charts/live';
import { useSignalRender } from '../ui/useSignalRender';
import {
  jobAlarms,
  liveRun,
  runAlarms,
  runStep,
  seriesOf,
  tracksOf
} from './liveCounts';

/**
 * The logged series the strip shows as "the loss": one named `loss`, else the
 * first whose name contains `loss` (any case), else the first logged series.
 */
export function pickLossSeries(names: readonly string[]): string | null {
  const logged = names.filter(n => !isMonitorSeries(n));
  return (
    logged.find(n => n === 'loss') ??
    logged.find(n => n.toLowerCase().includes('loss')) ??
    logged[0] ??
    null
  );
}

/**
 * The track whose norm the strip shows: the control's target, else the first
 * active one, among the tracks of `run` (default: the run the counters follow).
 */
export function currentTrack(
  model: TorchDbgModel,
  run: number = liveRun(model)
): IGradTrack | null {
  const tracks = tracksOf(model, run).filter(t => t.state !== 'disabled');
  const c = model.control.state;
  const targetName = c?.targets?.find(t => t.key === c.target)?.name;
  return tracks.find(t => t.name === targetName) ?? tracks[0] ?? null;
}

/** What the strip shows; `null` figures are "not available" (with a reason). */
export interface INowFigures {
  /**
   * Nothing is training: no step boundary ran recently (protocol 2.3
   * `control.idle`) and no run is current (a loop that only calls `log()`
   * has a current run but no optimizer step).
   */
  idle: boolean;
  run: number | null;
  step: number | null;
  loss: { name: string; value: number } | null;
  grad: { track: string; value: number } | null;
  memory: { kind: 'cuda' | 'rss'; bytes: number; where: string } | null;
  /** Gradient alarms of the run the strip follows. */
  alarms: number;
  /**
   * A torch.distributed job streaming to the kernel (protocol 2.4), while it
   * runs: its size, the steps of its slowest live rank, its alarms.
   */
  ranks: { size: number; step: number; alarms: number } | null;
}

/**
 * The strip's figures from the model (pure: no DOM). They follow the current
 * run (else the run shown) whichever run the user picked to look at, and every
 * count is the freshest the kernel sent (`liveCounts.ts`).
 */
export function nowFigures(model: TorchDbgModel): INowFigures {
  const c = model.control.state;
  const current = model.runs.current;
  const run = liveRun(model);
  const series = seriesOf(model, run);
  const track = currentTrack(model, run);
  let step = runStep(model, run);

  const lossName = pickLossSeries([...series.keys()]);
  const lossRing = lossName !== null ? series.get(lossName) : undefined;

  // a current run without step boundaries (only log()): its step is the
  // newest logged x of the loss series shown
  if (step === null && current !== null && lossRing && lossRing.length > 0) {
    step = lossRing.lastX;
  }
  const loss =
    lossName !== null && lossRing && lossRing.length > 0
      ? { name: lossName, value: lossRing.last }
      : null;

  let grad: INowFigures['grad'] = null;
  if (track) {
    const ring = series.get(track.total_series);
    const value =
      ring && ring.length > 0
        ? ring.last
        : track.stats
          ? wireNumber(track.stats.last[0])
          : null;
    grad = value === null ? null : { track: track.name, value };
  }

  let memory: INowFigures['memory'] = null;
  const mem = model.memory.status;
  if (mem) {
    const cuda = mem.devices.filter(
      d => d.allocator && Number.isFinite(d.allocator.allocated ?? NaN)
    );
    if (mem.state === 'active' && cuda.length) {
      memory = {
        kind: 'cuda',
        bytes: cuda.reduce((s, d) => s + Number(d.allocator!.allocated), 0),
        where: cuda.map(d => d.device).join(', ')
      };
    } else if (Number.isFinite(mem.host.rss ?? NaN)) {
      memory = { kind: 'rss', bytes: Number(mem.host.rss), where: 'cpu' };
    }
  }

  const job = model.ranks.job;
  const live = model.ranks.ranks.filter(r =>
    model.ranks.liveRanks.includes(r.identity.rank)
  );
  const ranks: INowFigures['ranks'] =
    job && job.state === 'running'
      ? {
          size: job.world_size,
          step: live.length ? Math.min(...live.map(r => r.step)) : 0,
          alarms: jobAlarms(model)
        }
      : null;

  return {
    ranks,
    idle: c?.idle === true && current === null,
    run: current ?? c?.run ?? null,
    step,
    loss,
    grad,
    memory,
    alarms: runAlarms(model, run)
  };
}

const DASH = '—';

function Figure(props: {
  label: string;
  value: string;
  title: string;
  className: string;
}): JSX.Element {
  return (
    <span
      className={`jp-TorchDbg-nowItem ${props.className}`}
      title={props.title}
    >
      <span className="jp-TorchDbg-nowLabel">{props.label}</span>
      <span className="jp-TorchDbg-nowValue">{props.value}</span>
    </span>
  );
}

/**
 * The live numbers, always in sight (sticky at the top of the panel): the step, the
 * logged loss, the total gradient norm, memory and the alarm count. Two rows at a
 * 250 px sidebar; "—" with a tooltip saying why when a figure is not available.
 */
export function NowStrip(props: {
  model: TorchDbgModel;
  trans: TranslationBundle;
  /** Show the alarm list (the count was clicked). */
  onShowAlarms: () => void;
  /** Show the rank alarms (the count was clicked while the strip shows a job's ranks). */
  onShowRankAlarms?: () => void;
}): JSX.Element {
  const { model, trans } = props;
  useLiveTick(model.dataChanged);
  useSignalRender(model.grads.changed);
  useSignalRender(model.control.changed);
  useSignalRender(model.memory.changed);
  useSignalRender(model.runs.changed);
  useSignalRender(model.ranks.changed);
  const f = nowFigures(model);
  // the kernel itself idle while a distributed job it started runs: the job's figures
  const ranks = f.idle ? f.ranks : null;
  // the alarms of now: the kernel's run (unless only the job runs) and the job's
  const runAlarmsNow = ranks ? 0 : f.alarms;
  const jobAlarmsNow = f.ranks?.alarms ?? 0;
  const alarms = runAlarmsNow + jobAlarmsNow;
  const showRanks = runAlarmsNow === 0 && (jobAlarmsNow > 0 || ranks !== null);
  const alarmsTitle =
    alarms === 0
      ? f.ranks
        ? trans.__('No alarm in this run or in the rank job')
        : trans.__('No gradient alarm in this run')
      : jobAlarmsNow === 0
        ? trans.__('Show the alarm list (first alarm first)')
        : runAlarmsNow === 0
          ? trans.__('Show the rank alarms (first alarm first)')
          : trans.__(
              'Show the alarm list: %1 gradient alarms in this run (the %2 alarms of the rank job are in the Ranks section)',
              String(runAlarmsNow),
              String(jobAlarmsNow)
            );

  const stepText = f.step === null ? DASH : String(f.step);
  const stepTitle =
    f.step === null
      ? trans.__(
          'No training step yet: the step counts optimizer.step() calls.'
        )
      : f.run !== null
        ? trans.__('Step %1 of run %2', stepText, String(f.run))
        : trans.__('Optimizer steps taken: %1', stepText);

  const lossTitle = f.loss
    ? trans.__('Latest value of the logged series "%1"', f.loss.name)
    : trans.__(
        'Nothing logged yet: call log(loss=loss) in your training loop.'
      );
  const gradTitle = f.grad
    ? trans.__(
        'Total gradient norm of %1 at its latest sampled step',
        f.grad.track
      )
    : trans.__(
        'No gradient norm yet: the monitor reads it at each optimizer.step().'
      );
  const memTitle = f.memory
    ? f.memory.kind === 'cuda'
      ? trans.__('CUDA memory allocated by tensors (%1)', f.memory.where)
      : trans.__('Resident memory (RSS) of the kernel process')
    : trans.__('Memory figures appear once torch is imported in the kernel.');

  return (
    <div
      className="jp-TorchDbg-now"
      data-idle={f.idle ? 'true' : 'false'}
      aria-label={trans.__('Now')}
    >
      <div className="jp-TorchDbg-nowRow jp-TorchDbg-nowTop">
        {ranks ? (
          <Figure
            className="jp-TorchDbg-nowStep jp-TorchDbg-nowRanks"
            label={trans.__('%1 ranks · step', String(ranks.size))}
            value={String(ranks.step)}
            title={trans.__(
              'A %1-rank job runs: its slowest rank has taken %2 optimizer steps (see the Ranks section)',
              String(ranks.size),
              String(ranks.step)
            )}
          />
        ) : f.idle ? (
          <span
            className="jp-TorchDbg-nowItem jp-TorchDbg-nowIdle"
            title={
              f.step === null
                ? trans.__('No step boundary ran in the last seconds.')
                : trans.__(
                    'No step boundary ran in the last seconds (last run: %1 steps).',
                    stepText
                  )
            }
          >
            {trans.__('Idle: nothing is training')}
          </span>
        ) : (
          <Figure
            className="jp-TorchDbg-nowStep"
            label={
              f.run !== null
                ? trans.__('run %1 · step', String(f.run))
                : trans.__('step')
            }
            value={stepText}
            title={stepTitle}
          />
        )}
        <button
          className="jp-TorchDbg-nowAlarms"
          data-count={alarms}
          data-of={showRanks ? 'ranks' : 'grads'}
          data-run={runAlarmsNow}
          data-job={jobAlarmsNow}
          disabled={alarms === 0}
          title={alarmsTitle}
          onClick={
            showRanks
              ? (props.onShowRankAlarms ?? props.onShowAlarms)
              : props.onShowAlarms
          }
        >
          {alarms === 1
            ? trans.__('1 alarm')
            : trans.__('%1 alarms', String(alarms))}
        </button>
      </div>
      <div className="jp-TorchDbg-nowRow jp-TorchDbg-nowFigures">
        <Figure
          className="jp-TorchDbg-nowLoss"
          label={f.loss ? f.loss.name : trans.__('loss')}
          value={f.loss ? formatCompact(f.loss.value, 2) : DASH}
          title={lossTitle}
        />
        <Figure
          className="jp-TorchDbg-nowGrad"
          label={trans.__('grad')}
          value={f.grad ? formatCompact(f.grad.value, 2) : DASH}
          title={gradTitle}
        />
        <Figure
          className="jp-TorchDbg-nowMem"
          label={f.memory?.kind === 'cuda' ? trans.__('cuda') : trans.__('rss')}
          value={f.memory ? formatBytes(f.memory.bytes) : DASH}
          title={memTitle}
        />
      </div>
    </div>
  );
}
