"""The odd one out: among the objects that took part, those on the minority device (or of
the minority dtype), and a one-sentence headline that names them.

A mismatch is usually one object left behind: a mask made on the wrong device, a batch
not moved, one float64 array from NumPy among float32 tensors. Listing every tensor
leaves the user to find it; counting where the objects are names it, and the remedy
moves that object and nothing else. Each object counts once (a module with its
parameters is one vote). A tie goes to where the model is: ``model.to(device)`` was
written on purpose. The rules say what else a value loses to (a meta tensor has no
data, so meta is never where things should go).
"""

from __future__ import annotations

from collections.abc import Callable

from .context import Row, describe

#: Odd objects named in a headline before "and N more".
MAX_NAMED = 3


def majority(
    counts: dict[str, int],
    *,
    model: str | None = None,
    never: tuple[str, ...] = (),
    rank: Callable[[str], int] = lambda _v: 0,
) -> str:
    """The value most objects share. ``never``: values that cannot win while another is
    present; a tie goes to ``model``'s value, then to the lowest ``rank``."""
    eligible = [v for v in counts if v not in never] or list(counts)
    top = max(counts[v] for v in eligible)
    tied = [v for v in eligible if counts[v] == top]
    if model in tied:
        return model
    return min(tied, key=rank)


def split(items: list[Row], value: Callable[[Row], str | None], win: str) -> list[Row]:
    """The objects whose value is not ``win`` (in their order)."""
    return [c for c in items if value(c) not in (None, win)]


def model_value(items: list[Row], value: Callable[[Row], str | None]) -> str | None:
    """Where the model is: the value its modules share, else that of its parameters
    (an optimizer step sees parameters, not modules). None when they disagree."""
    for kind in ("module", "Parameter"):
        vs = {
            value(c)
            for c in items
            if (c.get("kind") == kind or c.get("type") == kind) and value(c) is not None
        }
        if len(vs) == 1:
            return vs.pop()
        if vs:
            return None
    return None


def sentence(
    odd: list[Row], rest: list[Row], odd_v: str, rest_v: str, *, noun: str, on: str
) -> str:
    """``"`mask` is on meta; `model` and the other 3 tensors are on cpu"``: the odd
    objects by name, the others by name when few, else counted."""
    a, a_many = group_text(odd, noun=noun, rest=False)
    b, b_many = group_text(rest, noun=noun, rest=True)
    text = f"{a} {'are' if a_many else 'is'} {on}{odd_v}"
    if b:
        text += f"; {b} {'are' if b_many else 'is'} {on}{rest_v}"
    return text[:1].upper() + text[1:] if text[:1].isalpha() else text


def group_text(group: list[Row], *, noun: str, rest: bool) -> tuple[str, bool]:
    """How a group reads in a headline, and whether it takes a plural verb."""
    mods = [c for c in group if c.get("kind") == "module"]
    tens = [c for c in group if c.get("kind") != "module"]
    if len(mods) == 1 and not tens:
        return f"{module_label(mods[0], possessive=True)} {noun}", True
    parts = [module_label(c) for c in mods]
    if rest and (len(tens) > 2 or (tens and not all(c.get("named", True) for c in tens))):
        n = len(tens)
        parts.append(f"the other {n} tensors" if n > 1 else "the other tensor")
        many = n > 1 or len(parts) > 1
        return join(parts), many
    shown = tens if len(tens) <= MAX_NAMED + 1 else tens[:MAX_NAMED]
    parts += [describe(c) for c in shown]
    if len(shown) < len(tens):
        parts.append(f"{len(tens) - len(shown)} more")
    return join(parts), len(parts) > 1


def module_label(c: Row, *, possessive: bool = False) -> str:
    """`model`, or "the Linear module" for one with no user name."""
    if c.get("named", True) and c.get("name") != "self":
        return f"`{c['name']}`"
    return f"the {c.get('type', '?')} module" + ("'s" if possessive else "")


def join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]
