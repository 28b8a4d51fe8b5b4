"""The memory panel's action arguments (R14, S3): no paths, no code, numbers checked.

``record_memory`` ``{"op": "start", "max_entries"?}`` / ``{"op": "stop"}``;
``save_checkpoint`` ``{"filename"?, "overwrite"?}`` (a plain file name in the kernel's
working directory; without one, a fresh ``checkpoint_<time>[-N].pt`` that never replaces
a file). Bounds and the file-name pattern come from the protocol schema
(``ActionRecordMemory``, ``ActionSaveCheckpoint``); the handlers are in
``action_handlers``.
"""

from __future__ import annotations

import re
import time
from functools import cache

from ..action_args import action_args_schema, bounds, only_keys
from ..action_registry import ActionError
from .recording import DEFAULT_MAX_ENTRIES


@cache
def _filename_pattern() -> re.Pattern[str]:
    """A plain file name: no directory part, no '..', a .pt/.pth extension (S3)."""
    prop = action_args_schema("save_checkpoint")["properties"]["filename"]
    return re.compile(prop["pattern"])


def validate_record(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"op", "max_entries"})
    op = args.get("op")
    if op not in ("start", "stop"):
        raise ActionError("op must be 'start' or 'stop'")
    if op == "stop":
        if "max_entries" in args:
            raise ActionError("max_entries is only for op 'start'")
        return {"op": "stop"}
    n = args.get("max_entries", DEFAULT_MAX_ENTRIES)
    if isinstance(n, bool) or not isinstance(n, int):
        raise ActionError("max_entries must be a whole number")
    b = bounds("record_memory", "max_entries")
    if not (b.minimum or 0) <= n <= (b.maximum or 0):
        raise ActionError(f"max_entries must be between {b.minimum:.0f} and {b.maximum:.0f}")
    return {"op": "start", "max_entries": n}


def validate_filename(name: object) -> str:
    if not isinstance(name, str):
        raise ActionError("filename must be a string")
    if "/" in name or "\\" in name or ".." in name or "\x00" in name:
        raise ActionError("filename must be a plain file name (no directories, no '..')")
    # fullmatch: with match, the pattern's "$" also matches before a final newline.
    if not _filename_pattern().fullmatch(name):
        raise ActionError(
            "filename must be letters, digits, '.', '_', '-' or spaces, at most 128 "
            "characters, ending in .pt or .pth"
        )
    return name


def validate_checkpoint(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"filename", "overwrite"})
    overwrite = args.get("overwrite", False)
    if not isinstance(overwrite, bool):
        raise ActionError("overwrite must be true or false")
    name = args.get("filename")
    if name is None:
        # A default name is made unique at save time (two saves in one second: -2, -3...).
        return {
            "filename": time.strftime("checkpoint_%Y%m%d-%H%M%S.pt"),
            "overwrite": False,
            "unique": True,
        }
    return {"filename": validate_filename(name), "overwrite": overwrite, "unique": False}
