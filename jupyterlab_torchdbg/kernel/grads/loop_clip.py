"""The loop's own clip as the gradient monitor uses it (the hooks are user_clip.py's).

A clip call (``clip_grad_norm_`` / ``clip_grad_value_``) is matched to the tracks whose
parameters it clipped by its first tensors (``model.parameters()`` comes in the same
order as the optimizer's or the model's); those tracks learn that their loop clips
(``Track.user_clip``: the messages say which norm was read, the remedies never advise
that clip), and a hand-updated model (``ModelSource``) keeps it across runs: its loop is
read at its ``clip_grad_norm_`` from then on (monitor.on_backward). ``clipping_of`` is
what an alarm check is told (alerts.Clipping); ``learning_rate`` the update's scale.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TypeAlias

from ..backward_boundary import END_OF_BACKWARD, ModelSource
from ..lr_value import read_lr
from ..user_clip import names_norm_clip
from .alerts import Clipping

if TYPE_CHECKING:
    import torch

    from ..step_read import StepRead
    from .monitor_view import MonitorView
    from .track import Track

#: The tensors a clip call was given (parameters, or gradients for a value clip).
Tensors: TypeAlias = "Sequence[torch.Tensor]"
#: Tensors of a clip call looked at to find its tracks.
MATCH_TENSORS = 64
NORM = "clip_grad_norm_"


def defer(mon: MonitorView, source: ModelSource, key: torch.optim.Optimizer) -> StepRead | None:
    """At the end of backward of ``source`` (``mon``: the GradMonitor, not imported: it
    imports this): a loop seen clipping by norm is read at its clip, after it (the
    step is counted here, its read deferred: ``after_clip``); None: read it now. At its
    first pass, a loop whose code names ``clip_grad_norm_`` waits for it too. If the
    clip did not come after the last pass, that step went unread and the loop is read
    at the end of backward again. Not while the panel's clip action is on (it clips
    here, with the norms read here)."""
    from ..step_read import StepRead

    track = mon.tracks.get(key)
    if track is not None and track.deferred is not None:
        track.deferred = None
        source.user_clip = None
    if not source.hinted:  # its first pass: does the loop's code name clip_grad_norm_?
        source.hinted = True
        if source.user_clip is None and names_norm_clip(sys._getframe()):
            source.user_clip = (NORM, math.nan)  # the bound comes with the call
    if source.user_clip is None or source.user_clip[0] != NORM or mon.clipping():
        return None
    now = mon.clock()
    track = mon._begin(key, now)
    track.deferred = track.sampler.tick(now) or track.skip_nonfinite
    return StepRead(step=track.step, params=None, norms=None, scaler=None)


def after_clip(mon: MonitorView, tensors: Tensors, kind: str, bound: float, grads: bool) -> None:
    """The loop's own clip just ran: the tracks it clipped learn it; a deferred read of a
    loop without torch.optim happens now, on the clipped gradients."""
    for key, track, changed in clipped(list(mon.tracks.items()), tensors, kind, bound, grads):
        if changed:
            mon.status_changed()
        if track.deferred is not None:
            sample, track.deferred = track.deferred, None
            mon._read(track, key, mon.clock(), sample, replay=False)


def clipped(
    tracks: Sequence[tuple[torch.optim.Optimizer, Track]],
    tensors: Tensors,
    kind: str,
    bound: float,
    grads: bool,
) -> Iterator[tuple[torch.optim.Optimizer, Track, bool]]:
    """The (key, track, changed) of each track this clip call clipped, after noting it
    (``grads``: the call's tensors are gradients, as a value clip gives them)."""
    head = tensors[:MATCH_TENSORS]
    for key, track in tracks:
        if not track.owns(head, grads):
            continue
        changed = track.user_clip != (kind, bound)
        track.user_clip = (kind, bound)
        if isinstance(key, ModelSource):
            key.user_clip = (kind, bound)  # kept across runs
        yield key, track, changed


def clipping_of(track: Track, action: bool) -> Clipping:
    """What clips this track's gradients: the panel's clip action (``action``) and the
    loop's own clip once seen. A loop without torch.optim is read after its
    ``clip_grad_norm_`` (monitor.on_backward), before its ``clip_grad_value_``."""
    kind, bound = track.user_clip if track.user_clip is not None else (None, None)
    after = not (track.boundary == END_OF_BACKWARD and kind != NORM)
    spans = tuple((int(a or 0), b) for a, b in track.clip_spans)
    return Clipping(
        action=action, user=kind, user_bound=bound, after_user=after, action_spans=spans
    )


def learning_rate(optimizer: object) -> float | None:
    """The largest learning rate of the optimizer's groups (None: none known, e.g. a
    loop without torch.optim; never reads a device tensor)."""
    if optimizer is None or isinstance(optimizer, ModelSource):
        return None
    lrs = [read_lr(g.get("lr")) for g in getattr(optimizer, "param_groups", [])]
    known = [v for v in lrs if v is not None and v > 0]
    return max(known) if known else None
