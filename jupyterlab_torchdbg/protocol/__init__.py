"""The comm protocol shared by the kernel side and the lab extension.

The single source of truth is ``messages.schema.json`` beside this file (documented in
``PROTOCOL.md``). This module reads the version from the schema's ``x-protocol-version``
(the one place it is kept; the TypeScript constant is generated from the same field) and
holds the JSON encoding rules (NaN/Infinity as strings, numpy/torch scalars as
plain numbers). It must stay importable without torch.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).with_name("messages.schema.json")


def _schema_version() -> str:
    with SCHEMA_PATH.open(encoding="utf-8") as f:
        version = json.load(f)["x-protocol-version"]
    if not isinstance(version, str):
        raise TypeError(f"x-protocol-version in {SCHEMA_PATH} is not a string")
    return version


PROTOCOL_VERSION = _schema_version()
COMM_TARGET = "jupyterlab_torchdbg"
#: The target of the comm the kernel side opens (and closes at once) when it loads: the
#: panels of a kernel whose side was unloaded reattach (PROTOCOL.md, "Transport").
LOADED_TARGET = "jupyterlab_torchdbg.loaded"

#: Nesting deeper than this in a panel message is rejected as malformed (R14).
MAX_JSON_DEPTH = 16


@cache
# Any: a JSON Schema document, read by chained lookups (its shape is JSON Schema's)
def load_schema() -> dict[str, Any]:
    """Return the protocol JSON Schema (read once)."""
    with SCHEMA_PATH.open(encoding="utf-8") as f:
        schema: dict[str, Any] = json.load(f)  # Any: as load_schema's
    return schema


# Any: JSON Schema documents (the schema's and each result's), as load_schema's
def action_result_schemas(schema: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Each action's result schema (its definition's ``x-result``) by action name, each
    usable on its own (the schema's ``$defs`` attached, for its ``$ref``s). An action
    without one is not in the map."""
    # Any: the schema's definitions, read by chained lookups
    defs: dict[str, Any] = (schema or load_schema())["$defs"]
    out: dict[str, dict[str, Any]] = {}  # Any: a JSON Schema per action
    for ref in defs["Action"]["oneOf"]:
        definition = defs[ref["$ref"].removeprefix("#/$defs/")]
        result = definition.get("x-result")
        if isinstance(result, dict):
            out[definition["properties"]["action"]["const"]] = {"$defs": defs, **result}
    return out


#: ``MAJOR.MINOR`` in ASCII digits without leading zeros. Not ``str.isdigit``/``int``:
#: they accept "٢" (Arabic-Indic two), "²" and "02" as 2 (or raise on "²").
_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)", re.ASCII)


def parse_version(version: object) -> tuple[int, int] | None:
    """``(major, minor)`` of a strict ``MAJOR.MINOR`` string, else None (R07)."""
    if not isinstance(version, str) or len(version) > 32:
        return None
    m = _VERSION.fullmatch(version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def major(version: object) -> int | None:
    """Return the major part of ``MAJOR.MINOR``, or None when it is not of that form."""
    parsed = parse_version(version)
    return parsed[0] if parsed else None


def wire_safe(text: str) -> str:
    """``text`` encodable as UTF-8: lone surrogates (which JSON's ``\\udXXX`` escapes can
    carry in) become visible ``\\udXXX`` text. The kernel's session cannot encode them,
    so a message holding one would never arrive (R43)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def well_formed(text: str) -> bool:
    """``text`` is well-formed Unicode (no lone surrogates): it survives the wire as is."""
    return wire_safe(text) is text


def encode_float(value: float) -> float | str:
    """Encode a float for JSON: finite numbers as themselves, the rest as strings."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


# Any: the value's own shape made wire-safe (callers keep their message type)
def jsonable(value: object, _depth: int = 0) -> Any:
    """Make ``value`` safe for a comm message (R10).

    NaN and infinities become strings, numpy and torch scalars become Python numbers,
    tuples become lists, strings and keys with lone surrogates become encodable
    (``wire_safe``), and anything unknown becomes its type name. Never calls
    ``repr``/``str`` on user objects.
    """
    if _depth > MAX_JSON_DEPTH:
        return None
    if isinstance(value, str):
        return wire_safe(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return encode_float(value)
    if isinstance(value, dict):
        return {
            wire_safe(k): jsonable(v, _depth + 1) for k, v in value.items() if isinstance(k, str)
        }
    if isinstance(value, (list, tuple)):
        return [jsonable(v, _depth + 1) for v in value]
    item = getattr(type(value), "item", None)
    if item is not None and getattr(value, "ndim", None) == 0:
        # numpy / torch 0-d values (CPU only: callers never pass device tensors here).
        try:
            return jsonable(item(value), _depth + 1)
        except Exception:
            return None
    return f"<{type(value).__name__}>"


def json_depth(value: object, _depth: int = 0) -> int:
    """Nesting depth of a decoded JSON value (stops counting past MAX_JSON_DEPTH + 1)."""
    if _depth > MAX_JSON_DEPTH:
        return _depth
    if isinstance(value, dict):
        return max((json_depth(v, _depth + 1) for v in value.values()), default=_depth + 1)
    if isinstance(value, list):
        return max((json_depth(v, _depth + 1) for v in value), default=_depth + 1)
    return _depth
