"""Argument validation for panel actions, with the bounds read from the protocol schema.

The schema (``protocol/messages.schema.json``) is the one source of truth for what each
action accepts: ``ActionClip.args.max_norm`` says ``exclusiveMinimum: 0, maximum: 1e12``,
and ``schema_number(args, "clip", "max_norm")`` enforces exactly that. No bound is written
twice (a Python constant beside the schema would drift). Validators raise ``ActionError``
(code ``invalid_args``) with a message the panel shows as is (R14, S3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..protocol import load_schema
from .action_registry import ActionError


@dataclass(frozen=True)
class Bounds:
    """One numeric argument's bounds as the schema states them."""

    minimum: float | None
    maximum: float | None
    exclusive_minimum: bool
    integer: bool
    nullable: bool


@cache
# Any: a JSON Schema fragment, read by chained lookups here and in grads/ and memory/
def action_args_schema(action: str) -> dict[str, Any]:
    """The schema of ``args`` for ``action`` (the ``Action*`` definition whose const it is)."""
    defs = load_schema()["$defs"]
    for definition in defs.values():
        props = definition.get("properties", {}) if isinstance(definition, dict) else {}
        if props.get("action", {}).get("const") == action:
            args = props.get("args", {})
            if "$ref" in args:
                args = defs[args["$ref"].rsplit("/", 1)[-1]]
            return dict(args)
    raise KeyError(f"no action {action!r} in the protocol schema")


@cache
def bounds(action: str, key: str) -> Bounds:
    """The numeric bounds of argument ``key`` of ``action`` (from its ``oneOf`` branch
    with a numeric type when the argument also takes a string or null)."""
    args = action_args_schema(action)
    branches = [b for b in args.get("oneOf", [args]) if key in b.get("properties", {})]
    prop = branches[0]["properties"][key]
    options = prop.get("oneOf", [prop])
    numeric = [o for o in options if o.get("type") in ("number", "integer")]
    if not numeric:
        raise KeyError(f"{action}.{key} is not a number in the protocol schema")
    n = numeric[0]
    excl = "exclusiveMinimum" in n
    return Bounds(
        minimum=n.get("exclusiveMinimum", n.get("minimum")),
        maximum=n.get("maximum"),
        exclusive_minimum=excl,
        integer=n.get("type") == "integer",
        nullable=any(o.get("type") == "null" for o in options),
    )


def arg_names(action: str) -> set[str]:
    """Every argument name ``action`` accepts (over all of its ``oneOf`` branches)."""
    args = action_args_schema(action)
    names: set[str] = set()
    for branch in args.get("oneOf", [args]):
        names.update(branch.get("properties", {}))
    return names


def no_args(args: dict[str, object]) -> dict[str, object]:
    if args:
        raise ActionError(f"takes no arguments, got {sorted(args)!r}"[:200])
    return {}


def only_keys(args: dict[str, object], allowed: set[str]) -> None:
    extra = set(args) - allowed
    if extra:
        raise ActionError(f"unknown argument(s): {', '.join(sorted(extra))}"[:200])


def finite_number(
    args: dict[str, object],
    key: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    required: bool = True,
    default: float | None = None,
) -> float | None:
    """A real, finite number within bounds. Booleans and strings are rejected.

    JSON integers arrive as Python ints of any size: one beyond a float's range (e.g.
    ``10**400``) is out of range, an error like any other (R43), never an
    ``OverflowError`` out of the validator."""
    if key not in args:
        if required:
            raise ActionError(f"{key} is required")
        return default
    raw = args[key]
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ActionError(f"{key} must be a number, got {type(raw).__name__}")
    try:
        v = float(raw)
    except OverflowError:
        kind = "a negative integer" if raw < 0 else "an integer"
        bits = abs(int(raw)).bit_length()
        raise ActionError(f"{key} is out of range: {kind} of {bits} bits") from None
    if not math.isfinite(v):
        raise ActionError(f"{key} must be finite")
    if minimum is not None and (v <= minimum if exclusive_minimum else v < minimum):
        op = ">" if exclusive_minimum else ">="
        raise ActionError(f"{key} must be {op} {minimum:g}, got {v:g}")
    if maximum is not None and v > maximum:
        raise ActionError(f"{key} must be <= {maximum:g}, got {v:g}")
    return v


def whole_number(args: dict[str, object], key: str, minimum: float, maximum: float) -> int:
    """A finite whole number within bounds (``3.0`` counts as 3; ``2.5`` is rejected)."""
    v = finite_number(args, key, minimum=minimum, maximum=maximum)
    assert v is not None
    if v != int(v):
        raise ActionError(f"{key} must be a whole number, got {v:g}")
    return int(v)


def schema_number(args: dict[str, object], action: str, key: str) -> float | int | None:
    """``args[key]`` checked against the schema's bounds for ``action``'s argument ``key``
    (required; ``None`` passes only where the schema allows null)."""
    b = bounds(action, key)
    if b.nullable and key in args and args[key] is None:
        return None
    lo = b.minimum if b.minimum is not None else -math.inf
    hi = b.maximum if b.maximum is not None else math.inf
    if b.integer:
        return whole_number(args, key, lo, hi)
    return finite_number(args, key, minimum=lo, maximum=hi, exclusive_minimum=b.exclusive_minimum)


def string_list(args: dict[str, object], key: str, *, max_items: int = 10_000) -> list[str] | None:
    if key not in args:
        return None
    v = args[key]
    if not isinstance(v, list) or len(v) > max_items or not all(isinstance(s, str) for s in v):
        raise ActionError(f"{key} must be a list of at most {max_items} strings")
    return list(v)
