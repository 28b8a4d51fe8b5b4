/**
 * What the browser benchmarks read of the page: the Chrome DevTools Protocol's
 * `Performance.getMetrics` (TaskDuration, ScriptDuration, ... as they
 * accumulate), a requestAnimationFrame counter and the kernel messages that
 * arrive (by channel:type[:method], and the websocket's frames and kB).
 * `install` starts the counters, `sample` reads them, `window` turns two
 * samples into fractions of wall time and rates.
 */
import type { CDPSession } from '@playwright/test';

export interface IMetrics {
  durations: Record<string, number>;
  task: number;
  script: number;
  layout: number;
  frames: number;
  messages: Record<string, number>;
  wall: number;
}

/**
 * Start the frame and message counters in the page, and a CDP session with
 * `Performance` enabled.
 */
export async function install(page: any): Promise<CDPSession> {
  await page.evaluate(() => {
    const w = window as any;
    w.__benchFrames = 0;
    const tick = () => {
      w.__benchFrames++;
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
    // kernel messages the page receives, by channel and type (what arrives)
    w.__benchMessages = {};
    const kernel =
      w.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    // the kernel's websocket: frames and bytes (a private field: best effort)
    const ws = kernel._ws as WebSocket | undefined;
    ws?.addEventListener('message', (e: MessageEvent) => {
      const m = w.__benchMessages;
      m['websocket:messages'] = (m['websocket:messages'] ?? 0) + 1;
      m['websocket:kB'] =
        (m['websocket:kB'] ?? 0) +
        (typeof e.data === 'string' ? e.data.length : e.data.byteLength) / 1000;
    });
    kernel.anyMessage.connect((_: unknown, args: any) => {
      if (args.direction === 'recv') {
        const h = args.msg.header;
        const c = (args.msg.content ?? {}) as any;
        const key = `${args.msg.channel}:${h.msg_type}${
          h.msg_type === 'comm_msg' ? ':' + (c.data?.method ?? '') : ''
        }`;
        w.__benchMessages[key] = (w.__benchMessages[key] ?? 0) + 1;
      }
    });
  });
  // galata's page is a proxy: the session needs the real Page
  const real = page
    .context()
    .pages()
    .find((p: any) => p.url() === page.url())!;
  const cdp = await page.context().newCDPSession(real);
  await cdp.send('Performance.enable');
  return cdp;
}

export async function sample(page: any, cdp: CDPSession): Promise<IMetrics> {
  const { metrics } = await cdp.send('Performance.getMetrics');
  const get = (name: string) =>
    metrics.find((m: { name: string }) => m.name === name)?.value ?? 0;
  const { frames, messages } = await page.evaluate(() => ({
    frames: (window as any).__benchFrames as number,
    messages: { ...(window as any).__benchMessages } as Record<string, number>
  }));
  const durations: Record<string, number> = {};
  for (const m of metrics as { name: string; value: number }[]) {
    if (m.name.endsWith('Duration')) {
      durations[m.name] = m.value;
    }
  }
  return {
    durations,
    task: get('TaskDuration'),
    script: get('ScriptDuration'),
    layout: get('LayoutDuration') + get('RecalcStyleDuration'),
    frames,
    messages,
    wall: Date.now() / 1000
  };
}

/** Two samples as fractions of the wall time between them, and rates. */
export function window(a: IMetrics, b: IMetrics) {
  const wall = b.wall - a.wall;
  const per = (x: number) => Number((x / wall).toFixed(4));
  return {
    window_s: Number(wall.toFixed(2)),
    busy_fraction: per(b.task - a.task),
    script_fraction: per(b.script - a.script),
    style_layout_fraction: per(b.layout - a.layout),
    fps: Number(((b.frames - a.frames) / wall).toFixed(1)),
    // every *Duration metric as a fraction of wall time (where the busy time goes)
    fractions: Object.fromEntries(
      Object.keys(b.durations).map(k => [
        k,
        per(b.durations[k] - (a.durations[k] ?? 0))
      ])
    ),
    // kernel messages received per second, by channel:type[:method]
    kernel_messages_per_s: Object.fromEntries(
      Object.keys(b.messages).map(k => [
        k,
        Number(((b.messages[k] - (a.messages[k] ?? 0)) / wall).toFixed(2))
      ])
    )
  };
}
