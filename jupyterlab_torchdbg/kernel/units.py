"""Byte sizes as people read them, shared by every feature that reports memory.

Neutral ground: the exception diagnosis (OOM messages) and the memory panel (autopsy,
breakdown) both format and parse sizes with these, so neither imports the other for it.
"""

from __future__ import annotations

#: Every unit an error message may use, binary (PyTorch, ``KiB``) and decimal (``KB``).
BYTE_UNITS = {
    "B": 1,
    "bytes": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}


def fmt_bytes(n: int | None) -> str:
    """``n`` bytes in the largest binary unit it fills (``1.50 GiB``); None -> "n/a"."""
    if n is None:
        return "n/a"
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if abs(n) >= BYTE_UNITS[unit]:
            return f"{n / BYTE_UNITS[unit]:.2f} {unit}"
    return f"{n} bytes"


def short_bytes(n: float | None) -> str:
    """``n`` bytes with one decimal, for sentences (``2.1 MiB``, ``23.6 GiB``, ``512 B``;
    GiB is the largest unit); None -> "?"."""
    if n is None:
        return "?"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024 or unit == "GiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} GiB"  # pragma: no cover
