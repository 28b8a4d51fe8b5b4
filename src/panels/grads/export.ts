import { TorchDbgModel } from '../../model/model';
import { IGradTrack } from '../../protocol/messages';

/** The series of one optimizer: total first, then each layer. */
export function trackSeries(
  model: TorchDbgModel,
  track: IGradTrack
): { name: string; label: string }[] {
  const layers = model.grads.layers(track);
  return [
    { name: track.total_series, label: 'total' },
    ...layers.map(l => ({ name: l.series, label: l.name }))
  ];
}

function csvCell(v: string): string {
  // Quote every text cell; a leading =,+,-,@ is neutralised (CSV injection).
  const safe = /^[=+\-@]/.test(v) ? `'${v}` : v;
  return `"${safe.replace(/"/g, '""')}"`;
}

function num(v: number): string {
  return Number.isNaN(v)
    ? 'nan'
    : v === Infinity
      ? 'inf'
      : v === -Infinity
        ? '-inf'
        : String(v);
}

/** Gradient-norm history as CSV: one row per step, one column per series. */
export function gradsCsv(model: TorchDbgModel): string {
  const status = model.grads.status;
  const lines: string[] = [];
  for (const track of status?.tracks ?? []) {
    const cols = trackSeries(model, track).filter(c =>
      model.series.has(c.name)
    );
    if (!cols.length) {
      continue;
    }
    const arrays = cols.map(c => model.series.get(c.name)!.toArrays());
    const n = Math.min(...arrays.map(a => a.x.length));
    lines.push(
      ['optimizer', 'step', ...cols.map(c => c.label)].map(csvCell).join(',')
    );
    for (let i = 0; i < n; i++) {
      lines.push(
        [
          csvCell(track.name),
          num(arrays[0].x[i]),
          ...arrays.map(a => num(a.y[i]))
        ].join(',')
      );
    }
  }
  return lines.join('\n') + '\n';
}

/** Gradient-norm history, status and alarms as JSON (NaN/Inf as strings). */
export function gradsJson(model: TorchDbgModel): string {
  const status = model.grads.status;
  const tracks = (status?.tracks ?? []).map(track => ({
    name: track.name,
    step: track.step,
    stride: track.stride,
    layers: model.grads.layers(track),
    series: Object.fromEntries(
      trackSeries(model, track)
        .filter(c => model.series.has(c.name))
        .map(c => {
          const { x, y } = model.series.get(c.name)!.toArrays();
          return [
            c.label,
            {
              step: Array.from(x),
              norm: Array.from(y, v => (Number.isFinite(v) ? v : num(v)))
            }
          ];
        })
    )
  }));
  return JSON.stringify(
    {
      thresholds: status?.thresholds ?? null,
      alerts: model.grads.alerts,
      tracks
    },
    null,
    1
  );
}

/** Save text as a file through the browser (a Blob URL we made; no kernel data in the URL). */
export function download(filename: string, text: string, mime: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: mime }));
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
