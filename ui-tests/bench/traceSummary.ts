/**
 * Where the browser's main-thread time goes, from a Chrome trace (the
 * `devtools.timeline` events of `browser.startTracing`) and a CPU profile
 * (the DevTools Protocol's `Profiler`): self time by category and by event
 * name, and the JavaScript functions with the most self time. Used by the
 * browser benchmark (`stream.bench.ts`) to record a summary in its JSON.
 */

/** One event of a Chrome trace (the fields used here). */
export interface ITraceEvent {
  name: string;
  cat?: string;
  ph: string;
  pid: number;
  tid: number;
  ts: number;
  dur?: number;
  tdur?: number;
  args?: { name?: string; data?: unknown };
}

/** Self time (ms) of a category or an event name: wall clock, and on-CPU. */
export interface ISelfTime {
  wall_ms: number;
  cpu_ms: number;
}

/** The trace's summary for the renderer main thread of the page. */
export interface ITraceSummary {
  /** Wall time the trace covers (first to last event of the thread), ms, less `devtools_ms`. */
  span_ms: number;
  /** Tasks serving the DevTools protocol (tracing, profiling): left out. */
  devtools_ms: number;
  /** Top-level tasks' wall time / span (the busy fraction the trace sees). */
  busy_fraction: number;
  /** Top-level tasks' on-CPU time / span (busy less time the thread waited for a core). */
  cpu_fraction: number;
  /** Self time by category (fractions of span). */
  categories: Record<string, { wall: number; cpu: number }>;
  /** Event names with the most self wall time (ms). */
  top_events: {
    name: string;
    wall_ms: number;
    cpu_ms: number;
    count: number;
  }[];
  /** Frames the compositor drew (`DrawFrame`) per second. */
  draw_frames_per_s: number | null;
}

/** The categories DevTools' Performance panel uses, by event name. */
const CATEGORY: Record<string, string> = {
  FunctionCall: 'scripting',
  EvaluateScript: 'scripting',
  'v8.compile': 'scripting',
  'v8.compileModule': 'scripting',
  'v8.run': 'scripting',
  'v8.callFunction': 'scripting',
  'V8.Execute': 'scripting',
  TimerFire: 'scripting',
  FireAnimationFrame: 'scripting',
  FireIdleCallback: 'scripting',
  RunMicrotasks: 'scripting',
  EventDispatch: 'scripting',
  XHRReadyStateChange: 'scripting',
  XHRLoad: 'scripting',
  'V8.StackGuard': 'scripting',
  MinorGC: 'gc',
  MajorGC: 'gc',
  GCEvent: 'gc',
  'BlinkGC.AtomicPhase': 'gc',
  'CppGC.AtomicPhase': 'gc',
  'V8.GC_SCAVENGER': 'gc',
  'V8.GC_MC_BACKGROUND_MARKING': 'gc',
  'V8.GCScavenger': 'gc',
  'V8.GCFinalizeMC': 'gc',
  'V8.GCIncrementalMarking': 'gc',
  'V8.GCCompactor': 'gc',
  UpdateLayoutTree: 'style',
  RecalculateStyles: 'style',
  ScheduleStyleRecalculation: 'style',
  InvalidateLayout: 'layout',
  Layout: 'layout',
  'IntersectionObserverController::computeIntersections': 'observers',
  ResizeObserverController: 'observers',
  HitTest: 'layout',
  PrePaint: 'paint',
  Paint: 'paint',
  PaintImage: 'paint',
  PaintSetup: 'paint',
  UpdateLayer: 'paint',
  UpdateLayerTree: 'paint',
  Layerize: 'paint',
  CompositeLayers: 'paint',
  Commit: 'paint',
  'Decode Image': 'paint',
  ParseHTML: 'loading',
  ParseAuthorStyleSheet: 'loading',
  ResourceReceivedData: 'loading'
};

/** Top-level task names (a thread's busy time is the sum of these). */
const TASK = new Set(['RunTask', 'ThreadControllerImpl::RunTask']);

function category(name: string): string {
  if (CATEGORY[name]) {
    return CATEGORY[name];
  }
  if (TASK.has(name)) {
    return 'task (unattributed)';
  }
  if (/GC/.test(name)) {
    return 'gc';
  }
  return 'other';
}

/** Complete events (`X`, and `B`/`E` pairs) of one thread, sorted by start. */
function completeEvents(events: ITraceEvent[]): ITraceEvent[] {
  const out: ITraceEvent[] = [];
  const open: ITraceEvent[] = [];
  for (const e of events) {
    if (e.ph === 'X') {
      out.push(e);
    } else if (e.ph === 'B') {
      open.push(e);
    } else if (e.ph === 'E') {
      const b = open.pop();
      if (b) {
        out.push({ ...b, ph: 'X', dur: e.ts - b.ts });
      }
    }
  }
  // parents before children: earlier start first, then the longer one
  out.sort((a, b) => a.ts - b.ts || (b.dur ?? 0) - (a.dur ?? 0));
  return out;
}

/**
 * Summarise the main thread of the page's renderer: the `CrRendererMain`
 * thread with the most top-level task time.
 */
export function summarizeTrace(
  events: ITraceEvent[],
  topN = 25
): ITraceSummary | null {
  const threads = new Map<string, ITraceEvent[]>();
  const mains = new Set<string>();
  for (const e of events) {
    const key = `${e.pid}:${e.tid}`;
    if (e.ph === 'M') {
      if (e.name === 'thread_name' && e.args?.name === 'CrRendererMain') {
        mains.add(key);
      }
      continue;
    }
    let list = threads.get(key);
    if (!list) {
      list = [];
      threads.set(key, list);
    }
    list.push(e);
  }
  let best: ITraceEvent[] | null = null;
  let bestBusy = -1;
  for (const key of mains) {
    const list = threads.get(key) ?? [];
    const busy = list
      .filter(e => TASK.has(e.name) && e.ph === 'X')
      .reduce((s, e) => s + (e.dur ?? 0), 0);
    if (busy > bestBusy) {
      best = list;
      bestBusy = busy;
    }
  }
  if (!best || best.length === 0) {
    return null;
  }
  const all = completeEvents(best);
  let t0 = Infinity;
  let t1 = -Infinity;
  for (const e of all) {
    t0 = Math.min(t0, e.ts);
    t1 = Math.max(t1, e.ts + (e.dur ?? 0));
  }
  // top-level tasks with their nested events; those that serve the DevTools
  // protocol (the benchmark's own tracing and profiling) are left out
  const tasks: ITraceEvent[][] = [];
  let end = -Infinity;
  for (const e of all) {
    if (e.ts >= end) {
      tasks.push([e]);
      end = e.ts + (e.dur ?? 0);
    } else {
      tasks[tasks.length - 1].push(e);
    }
  }
  let devtools = 0;
  const kept = tasks.filter(t => {
    const tool = t.some(
      e =>
        e.name === 'Receive mojo message' &&
        /DevTools/.test(JSON.stringify(e.args ?? {}))
    );
    if (tool) {
      devtools += t[0].dur ?? 0;
    }
    return !tool;
  });
  const span = Math.max(1, t1 - t0 - devtools);
  // self time: an event's duration less its children's (a stack of open events)
  const self = new Map<string, ISelfTime & { count: number }>();
  let busyWall = 0;
  let busyCpu = 0;
  for (const task of kept) {
    busyWall += task[0].dur ?? 0;
    busyCpu += task[0].tdur ?? task[0].dur ?? 0;
    const stack: {
      e: ITraceEvent;
      end: number;
      childWall: number;
      childCpu: number;
    }[] = [];
    const close = (until: number) => {
      while (stack.length && stack[stack.length - 1].end <= until) {
        const top = stack.pop()!;
        const wall = (top.e.dur ?? 0) - top.childWall;
        const cpuTotal = top.e.tdur ?? top.e.dur ?? 0;
        const cpu = cpuTotal - top.childCpu;
        const s = self.get(top.e.name) ?? { wall_ms: 0, cpu_ms: 0, count: 0 };
        s.wall_ms += Math.max(0, wall) / 1000;
        s.cpu_ms += Math.max(0, cpu) / 1000;
        s.count++;
        self.set(top.e.name, s);
        const parent = stack[stack.length - 1];
        if (parent) {
          parent.childWall += top.e.dur ?? 0;
          parent.childCpu += cpuTotal;
        }
      }
    };
    for (const e of task) {
      close(e.ts);
      stack.push({ e, end: e.ts + (e.dur ?? 0), childWall: 0, childCpu: 0 });
    }
    close(Infinity);
  }
  const categories: Record<string, { wall: number; cpu: number }> = {};
  for (const [name, s] of self) {
    const c = category(name);
    const acc = categories[c] ?? { wall: 0, cpu: 0 };
    acc.wall += s.wall_ms;
    acc.cpu += s.cpu_ms;
    categories[c] = acc;
  }
  const spanMs = span / 1000;
  for (const c of Object.keys(categories)) {
    categories[c] = {
      wall: Number((categories[c].wall / spanMs).toFixed(4)),
      cpu: Number((categories[c].cpu / spanMs).toFixed(4))
    };
  }
  const top_events = [...self.entries()]
    .sort((a, b) => b[1].wall_ms - a[1].wall_ms)
    .slice(0, topN)
    .map(([name, s]) => ({
      name,
      wall_ms: Number(s.wall_ms.toFixed(1)),
      cpu_ms: Number(s.cpu_ms.toFixed(1)),
      count: s.count
    }));
  const draws = events.filter(e => e.name === 'DrawFrame').length;
  return {
    span_ms: Number(spanMs.toFixed(0)),
    devtools_ms: Number((devtools / 1000).toFixed(0)),
    busy_fraction: Number((busyWall / span).toFixed(4)),
    cpu_fraction: Number((busyCpu / span).toFixed(4)),
    categories,
    top_events,
    draw_frames_per_s: draws ? Number((draws / (span / 1e6)).toFixed(1)) : null
  };
}

/** A CPU profile as the DevTools Protocol's `Profiler.stop` returns it. */
export interface ICpuProfile {
  nodes: {
    id: number;
    callFrame: {
      functionName: string;
      url: string;
      lineNumber: number;
      columnNumber: number;
    };
  }[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

/** Functions with the most self time in a CPU profile (ms, and a fraction of it). */
export function summarizeProfile(
  profile: ICpuProfile,
  topN = 30
): {
  span_ms: number;
  top_functions: { fn: string; self_ms: number; fraction: number }[];
} {
  const byId = new Map(profile.nodes.map(n => [n.id, n]));
  const self = new Map<string, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  // a sample's time is the gap to the next sample
  for (let i = 0; i < samples.length; i++) {
    const next = i + 1 < deltas.length ? deltas[i + 1] : 0;
    const node = byId.get(samples[i]);
    if (!node) {
      continue;
    }
    const f = node.callFrame;
    const file = f.url ? f.url.split('/').pop()!.split('?')[0] : '';
    const key = file
      ? `${f.functionName || '(anonymous)'} ${file}:${f.lineNumber + 1}`
      : f.functionName || '(anonymous)';
    self.set(key, (self.get(key) ?? 0) + Math.max(0, next));
  }
  const span = Math.max(1, profile.endTime - profile.startTime);
  return {
    span_ms: Number((span / 1000).toFixed(0)),
    top_functions: [...self.entries()]
      .filter(([k]) => k !== '(idle)')
      .sort((a, b) => b[1] - a[1])
      .slice(0, topN)
      .map(([fn, us]) => ({
        fn,
        self_ms: Number((us / 1000).toFixed(1)),
        fraction: Number((us / span).toFixed(4))
      }))
  };
}
