"""One alarm check of a track: every row flushed since the last check, at most once a
second (monitor._after_flush) or sooner when many rows wait.

The detector (alarms.py) judges the rows, told what clips them and the optimizer's
learning rate (loop_clip.py); the logged loss's jumps join its alerts (divergence.py);
the layer table's statistics are folded in; a climbing norm makes the auto stride
sample every step for a while (stride.boost, which a cooldown bounds); a step the
non-finite guard diagnosed at the step is not alarmed again. A step GradScaler skipped
inside a fused optimizer's kernel is left out, as if it never reached the hooks (R31,
amp_skips.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import loop_clip, per_run
from .track import table_stats

if TYPE_CHECKING:
    from .alerts import Alert
    from .monitor_view import MonitorView
    from .track import Track


def check(mon: MonitorView, track: Track) -> list[Alert]:
    """Check ``track``'s waiting rows on the monitor ``mon`` (a GradMonitor, not
    imported: it imports this); returns the alerts it raised, already logged."""
    import torch

    rows, track.rows, track.rows_count = track.rows, [], 0
    # Rows are only recorded once the track has a layout (a None fails as before).
    if not rows or track.layout is None:
        return []
    width = 1 + len(track.layer_names) + (1 if track.layout.amp else 0)
    rows = [(xs, m) for xs, m in rows if m.shape[1] == width]  # layout changed
    if not rows:
        return []
    xs = [x for r, _ in rows for x in r]
    m = torch.cat([m for _, m in rows]) if len(rows) > 1 else rows[0][1]
    amp_skipped = track.amp_skips.skipped(max(xs))
    if amp_skipped:
        keep = [i for i, x in enumerate(xs) if int(x) not in amp_skipped]
        xs, m = [xs[i] for i in keep], m[keep]
        if not xs:
            return []
    det = track.detector
    skipped = det.skipped
    alerts = det.evaluate(
        xs,
        m,
        track.layer_names,
        loss_nonfinite=per_run.loss_nonfinite(mon.ext.stream),
        amp=bool(track.layout.amp),
        clipping=loop_clip.clipping_of(track, mon.clipping()),
        lr=loop_clip.learning_rate(track.opt_ref()),
    )
    alerts += det.loss_alerts(mon.ext.stream, mon.loss_watch, alerts)  # the logged loss's jumps
    track.stats = table_stats(m, track.stats, len(track.layer_names))
    if det.rising and track.sampler.mode == "auto":
        # The norm is climbing: watch every step for a while (see stride.boost).
        was = track.sampler.boosting
        if track.sampler.boost() and not was:
            mon.status_changed()
    # A step diagnosed at the step (nonfinite.py) is not alarmed again, later.
    alerts = [a for a in alerts if a.kind != "non_finite" or not mon.guard.covers(track, a.step)]
    if alerts or det.skipped != skipped:
        mon.status_changed()
    mon.alerts.add(alerts)
    if any(a.kind == "non_finite" for a in alerts):
        mon.guard.arm_probe(track)
    return alerts
