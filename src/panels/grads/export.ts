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

/** A float32 norm in its shortest round-tripping form (9 significant digits at most). */
function f32(v: number): string {
  if (!Number.isFinite(v)) {
    return num(v);
  }
  const f = Math.fround(v);
  for (let p = 6; p < 9; p++) {
    const s = Number(v.toPrecision(p));
    if (Math.fround(s) === f) {
      return String(s);
    }
  }
  return String(Number(v.toPrecision(9)));
}

/** The CSV's one header row. */
export const CSV_HEADER = 'run,step,layer,norm';

/**
 * Gradient-norm history as one tidy CSV table, `run,step,layer,norm`, one row per
 * (series, sampled step): the total norm as layer `total`, `run` blank when the
 * kernel gives none (protocol < 2.3). `pandas.read_csv` reads it as it is; NaN
 * and ±Inf are written `nan`, `inf`, `-inf`. With several optimizers the layer is
 * prefixed with the optimizer (`opt_d/total`, `opt_d/model.fc`), so no two series
 * share a name.
 */
export function gradsCsv(model: TorchDbgModel): string {
  const tracks = model.grads.status?.tracks ?? [];
  const prefix = tracks.length > 1;
  const lines: string[] = [CSV_HEADER];
  for (const track of tracks) {
    const run =
      track.run === undefined || track.run === null ? '' : String(track.run);
    for (const col of trackSeries(model, track)) {
      const ring = model.series.get(col.name);
      if (!ring) {
        continue;
      }
      const { x, y } = ring.toArrays();
      const layer = csvCell(prefix ? `${track.name}/${col.label}` : col.label);
      for (let i = 0; i < x.length; i++) {
        lines.push(`${run},${num(x[i])},${layer},${f32(y[i])}`);
      }
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
