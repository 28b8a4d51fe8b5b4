"""Every bound of one ``exception`` message, and keeping the finished message under them (R09).

``Limits`` is read while the message is built (frames walked and sent, locals per frame,
source lines, chain and group sizes); ``bound`` then drops detail, least useful first,
until the serialised message fits ``max_bytes``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Every bound of one exception message (R09)."""

    #: Traceback entries walked at most (a deeper stack is counted as truncated).
    walk: int = 200_000
    #: Frames sent at most; the rest are elided (outermost ``head`` + innermost).
    frames: int = 40
    head: int = 8
    #: Identical consecutive frames kept before a run is elided (as Python's traceback).
    repeats: int = 3
    #: Locals rows per user frame / per library frame.
    user_locals: int = 50
    library_locals: int = 12
    #: Source lines shown either side of a frame's line.
    context: int = 2
    line_chars: int = 300
    message_chars: int = 10_000
    chain: int = 8
    chain_message_chars: int = 2_000
    group: int = 20
    group_depth: int = 5
    #: The serialised message is kept under this many bytes (a comm message limit is far
    #: above; the panel stays responsive).
    max_bytes: int = 1_000_000


LIMITS = Limits()


def _size(msg: dict[str, object]) -> int:
    return len(json.dumps(msg, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace"))


def bound(msg: dict[str, object], limits: Limits) -> dict[str, object]:
    """Keep the message under ``max_bytes``: drop library locals, then source context,
    then user locals, then frames (R09). Marks ``truncated``."""
    steps: list[Callable[[dict[str, object]], None]] = [
        lambda m: _drop_locals(m, user=False),
        _drop_source,
        lambda m: _drop_locals(m, user=True),
        _drop_frames,
    ]
    for step in steps:
        if _size(msg) <= limits.max_bytes:
            return msg
        step(msg)
        msg["truncated"] = True
    return msg


def _frames(msg: dict[str, object]) -> list[dict[str, object]]:
    """The message's frame rows (dicts: the capture made them)."""
    frames = msg.get("frames", [])
    return [f for f in frames if isinstance(f, dict)] if isinstance(frames, list) else []


def _drop_locals(msg: dict[str, object], *, user: bool) -> None:
    for f in _frames(msg):
        if f.get("user") == user and f.get("locals"):
            f["locals"] = []
            f["locals_truncated"] = True


def _drop_source(msg: dict[str, object]) -> None:
    for f in _frames(msg):
        f.pop("source", None)


def _drop_frames(msg: dict[str, object]) -> None:
    focus = msg.get("focus")
    frames = _frames(msg)
    if isinstance(focus, int) and 0 <= focus < len(frames):
        msg["frames"] = [frames[focus]]
        msg["focus"] = 0
    else:
        msg["frames"] = frames[-1:]
        msg["focus"] = None
    msg["elided"] = []
    chain = msg.get("chain", [])
    msg["chain"] = chain[:1] if isinstance(chain, list) else chain
    msg.pop("group", None)
    d = msg.get("diagnosis")
    if isinstance(d, dict):
        # frame indices in the diagnosis no longer point at the right frames
        d["where"] = msg["focus"]
        for c in d.get("culprits", []):
            c.pop("frame", None)
