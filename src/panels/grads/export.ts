import { csvFloat32, csvNumber, csvText } from '../../model/csv';
import { TorchDbgModel } from '../../model/model';
import { SeriesRing } from '../../model/ringbuffer';
import { IGradTrack } from '../../protocol/messages';
import { NO_RUN } from '../runs/model';

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

/** The CSV's one header row. */
export const CSV_HEADER = 'run,step,layer,norm';

/** One optimizer's track in one run, with the rings of its series. */
interface ITrackRings {
  run: number;
  track: IGradTrack;
  series: { label: string; ring: SeriesRing }[];
}

/**
 * Every gradient track of every run the browser holds, oldest run first, with
 * the rings of its total and layers. A ring missing from its run (a kernel that
 * sends blocks without `run`) is taken from the points outside any run, once.
 */
function allTracks(model: TorchDbgModel): ITrackRings[] {
  const out: ITrackRings[] = [];
  const used = new Set<SeriesRing>();
  const outside = model.seriesOfRun(NO_RUN);
  for (const run of model.knownRuns()) {
    const tracks = model.grads.tracksOf(run);
    const rings = model.seriesOfRun(run);
    for (const track of tracks) {
      const series: ITrackRings['series'] = [];
      for (const col of trackSeries(model, track)) {
        let ring = rings.get(col.name);
        if (!ring) {
          const spare = outside.get(col.name);
          ring = spare && !used.has(spare) ? spare : undefined;
        }
        if (ring && !used.has(ring)) {
          used.add(ring);
          series.push({ label: col.label, ring });
        }
      }
      out.push({ run: track.run ?? run, track, series });
    }
  }
  return out;
}

/** `run` as a CSV cell: blank for points outside any run (a kernel before 2.3). */
function runCell(run: number | null | undefined): string {
  return run === undefined || run === null || run === NO_RUN ? '' : String(run);
}

/**
 * Gradient-norm history of every run the browser holds (the last five) as one
 * tidy CSV table, `run,step,layer,norm`, one row per (series, sampled step):
 * the total norm as layer `total`, `run` blank when the kernel gives none
 * (protocol < 2.3). `pandas.read_csv` reads it as it is; NaN and ±Inf are
 * written `nan`, `inf`, `-inf`. When more than one optimizer appears, the layer
 * is prefixed with the optimizer (`opt_d/total`, `opt_d/model.fc`), so no two
 * series share a name.
 */
export function gradsCsv(model: TorchDbgModel): string {
  const tracks = allTracks(model);
  const prefix = new Set(tracks.map(t => t.track.name)).size > 1;
  const lines: string[] = [CSV_HEADER];
  for (const { run, track, series } of tracks) {
    const r = runCell(run);
    for (const { label, ring } of series) {
      const { x, y } = ring.toArrays();
      const layer = csvText(prefix ? `${track.name}/${label}` : label);
      for (let i = 0; i < x.length; i++) {
        lines.push(`${r},${csvNumber(x[i])},${layer},${csvFloat32(y[i])}`);
      }
    }
  }
  return lines.join('\n') + '\n';
}

/**
 * Gradient-norm history of every run held, with each track's status, layers
 * and the alarms, as JSON (NaN/Inf as strings).
 */
export function gradsJson(model: TorchDbgModel): string {
  const status = model.grads.status;
  const tracks = allTracks(model).map(({ run, track, series }) => ({
    run: run === NO_RUN ? null : run,
    name: track.name,
    step: track.step,
    stride: track.stride,
    layers: model.grads.layers(track),
    series: Object.fromEntries(
      series.map(({ label, ring }) => {
        const { x, y } = ring.toArrays();
        return [
          label,
          {
            step: Array.from(x),
            norm: Array.from(y, v => (Number.isFinite(v) ? v : csvNumber(v)))
          }
        ];
      })
    )
  }));
  return JSON.stringify(
    {
      thresholds: status?.thresholds ?? null,
      alerts: model.grads.allAlerts,
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
