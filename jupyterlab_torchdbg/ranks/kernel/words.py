"""Ranks named in sentences: one rule for every alarm and action message.

A few ranks are listed ("ranks 0, 2, 3"); five or more consecutive ones read as a range
("ranks 0-199, 201-255"), so a message about hundreds of ranks stays a sentence.
"""

from __future__ import annotations

#: Consecutive ranks from this many on are written as a range.
RANGE_FROM = 5


def rank_list(numbers: list[int]) -> str:
    """``rank 3`` / ``ranks 0, 2, 3`` / ``ranks 0-199, 201-255``, in the order given."""
    ordered = list(numbers)
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i + 1 >= RANGE_FROM:
            parts.append(f"{ordered[i]}-{ordered[j]}")
        else:
            parts.extend(str(n) for n in ordered[i : j + 1])
        i = j + 1
    word = "rank " if len(ordered) == 1 else "ranks "
    return word + ", ".join(parts)
