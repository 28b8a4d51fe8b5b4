"""A rank's per-layer norms on the wire: the norms as one string (``packed``, since wire
version 3), the names by their ``layout`` (since wire version 4).

A ``rows`` message carries the newest sampled step's per-layer norms. As a JSON list of
numbers, hundreds of layers cost the kernel more to read than the rest of the message
(each float parsed, then checked: ~40 µs and ~140 µs for 200 layers, issue #25), and
the kernel needs them only now and then (the desync alarm's first differing layer).
Packed, they are the norms as little-endian IEEE-754
doubles, base64: one JSON string, read in ~2 µs, turned into numbers only when used.
Exact, NaN and the infinities included (no ``finite_or_special`` round trip).

The layer names, most of such a message (a real model's 200 names are ~5 kB against
the norms' 2 kB), change only when the model does: a report names its ``layout``
(``layout_of`` its names) and carries the names themselves only when the kernel may
not have them (worker/cadence.py ``LayerNames``); the kernel pairs the norms with the
names it last got for that layout, or with none (kernel/rank.py).
"""

from __future__ import annotations

import array
import base64
import binascii
import sys
import zlib
from collections.abc import Sequence


def layout_of(names: Sequence[str]) -> str:
    """The layers' layout: 8 hex digits of a CRC-32 of their names, in order."""
    return f"{zlib.crc32(chr(0).join(names).encode('utf-8', 'replace')):08x}"


def pack(values: Sequence[float]) -> str:
    """``values`` as little-endian float64, base64."""
    doubles = array.array("d", values)
    if sys.byteorder != "little":
        doubles.byteswap()
    return base64.b64encode(doubles.tobytes()).decode("ascii")


def unpack(text: object, limit: int) -> list[float] | None:
    """The floats ``pack`` wrote (None if ``text`` is not such a string, or holds more
    than ``limit`` of them)."""
    if not isinstance(text, str) or len(text) > 4 * -(-8 * limit // 3):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) % 8:
        return None
    doubles = array.array("d")
    doubles.frombytes(raw)
    if sys.byteorder != "little":
        doubles.byteswap()
    return doubles.tolist()
