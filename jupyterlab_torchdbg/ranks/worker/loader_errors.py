"""Which sample a DataLoader's dataset failed on: read where the error happens.

torch sends a DataLoader worker's exception to the main process as text: the worker
wraps it in ``torch._utils.ExceptionWrapper`` (the type, the formatted traceback and
"in DataLoader worker process N"), pickles it through the data queue, and the main
process raises ``ValueError("Caught ValueError in DataLoader worker process 0 ...")``.
The failing sample's index is in none of it: only the worker's frames knew it (the
fetcher's ``idx`` as it called ``dataset[idx]``, its ``possibly_batched_index``), and
they are gone by the time the kernel sees the error.

So, in a worker process of ours (activation.py: every process the notebook forks or
spawns while the extension is loaded, DataLoader workers included; never the kernel
itself), ``install`` wraps ``ExceptionWrapper.__init__``: after torch's own code ran,
when the process is a DataLoader worker (``get_worker_info()``), ``read`` walks the
traceback once and the result, a small dict of plain values, is set on the wrapper
(``ORIGIN_ATTR``). It travels with the wrapper's ``__dict__`` through torch's own
pickling; the kernel reads it from the ``reraise`` frame's ``self``
(kernel/exceptions/capture/loader_error.py). The exception, its message and traceback
are unchanged (R15): only an attribute no code of torch reads is added.

Cost: nothing until a dataset raises (the wrapper is only built then); then one walk of
at most ``MAX_FRAMES`` frames and reads of three locals. Never raises (a failure leaves
torch's wrapper as it was). A process forked or spawned after the extension unloads
gets nothing; a persistent worker started while it was loaded keeps the wrapper until
it exits (the kernel reads the attribute only while loaded).

``read`` also serves the main process (``num_workers=0``): the kernel calls it on the
raised exception's own traceback, whose frames are still alive there.

Values are never ``repr``\\ ed (R21): ints, short strings and small tuples/lists of them
are kept; anything else is named by its type only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, cast

from typing_extensions import NotRequired, TypedDict

if TYPE_CHECKING:
    import torch

    from ...protocol.json_types import JsonValue

#: The attribute set on torch's ``ExceptionWrapper`` in the worker.
ORIGIN_ATTR = "_torchdbg_origin"
#: Traceback entries walked at most.
MAX_FRAMES = 400
#: Indices of the batch kept at most.
MAX_BATCH = 64
#: Characters of a string index kept.
MAX_TEXT = 200
_FETCH_FILE = os.path.join("torch", "utils", "data", "_utils", "fetch.py")
_MARK = "_torchdbg_wraps"


class SampleOrigin(TypedDict):
    """What ``read`` finds of the failed sample (a worker adds its id and pid)."""

    index: JsonValue
    index_known: bool
    batch: list[JsonValue] | None
    batch_size: int | None
    dataset: str | None
    iterable: bool
    worker_id: NotRequired[int | None]
    pid: NotRequired[int]


def install() -> bool:
    """Wrap ``torch._utils.ExceptionWrapper.__init__`` in this process (idempotent).
    Called in worker processes only, once torch is imported. Never raises."""
    try:
        mod = sys.modules.get("torch._utils")
        cls = getattr(mod, "ExceptionWrapper", None)
        if not isinstance(cls, type):
            return False
        original = cls.__dict__.get("__init__")
        if original is None or getattr(original, _MARK, False):
            return original is not None
        cls.__init__ = _wrapped(original)  # type: ignore[misc]
        return True
    except Exception:
        return False


def _wrapped(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: object, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        try:
            if not _in_data_worker():
                return
            exc_info = args[0] if args else kwargs.get("exc_info")
            tb = exc_info[2] if isinstance(exc_info, tuple) and len(exc_info) == 3 else None
            if tb is None:
                tb = sys.exc_info()[2]
            found = read(tb)
            del tb
            if found is not None:
                info = sys.modules["torch.utils.data"].get_worker_info()
                found["worker_id"] = _plain_int(getattr(info, "id", None))
                found["pid"] = os.getpid()
                self.__dict__[ORIGIN_ATTR] = found
        except Exception:
            pass  # torch's wrapper stays as torch built it

    setattr(__init__, _MARK, True)
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__


def _in_data_worker() -> bool:
    data = sys.modules.get("torch.utils.data")
    get = getattr(data, "get_worker_info", None)
    return get is not None and get() is not None


def read(tb: TracebackType | None) -> SampleOrigin | None:
    """What the traceback shows of the sample that failed, or None when no dataset
    fetch is on it: ``{"index", "index_known", "batch", "batch_size", "dataset",
    "iterable"}``. ``index_known`` is True only when the fetcher's call of the dataset
    (``dataset[idx]``) is itself on the traceback: the index is then the one it passed."""
    frames: list[FrameType] = []
    while tb is not None and len(frames) < MAX_FRAMES:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    last_fetch = None
    for i, f in enumerate(frames):
        if f.f_code.co_filename.endswith(_FETCH_FILE):
            last_fetch = i
    if last_fetch is None:
        return None
    fetches = [f for f in frames if f.f_code.co_filename.endswith(_FETCH_FILE)]
    fetch = next((f for f in fetches if f.f_code.co_name == "fetch"), fetches[0])
    fetch_locals = fetch.f_locals
    fetcher = fetch_locals.get("self")
    iterable = type(fetcher).__name__ == "_IterableDatasetFetcher"
    batch_raw: object = fetch_locals.get("possibly_batched_index")
    out: SampleOrigin = {
        "index": None,
        "index_known": False,
        "batch": None,
        "batch_size": None,
        "dataset": _type_name(getattr(fetcher, "dataset", None)) if fetcher is not None else None,
        "iterable": iterable,
    }
    if iterable:
        return out  # an IterableDataset has no index: its samples come from an iterator
    auto = getattr(fetcher, "auto_collation", None)
    if auto is True and type(batch_raw) in (list, tuple) and isinstance(batch_raw, (list, tuple)):
        out["batch_size"] = len(batch_raw)
        out["batch"] = [_plain(v) for v in batch_raw[:MAX_BATCH]]
    nxt = frames[last_fetch + 1] if last_fetch + 1 < len(frames) else None
    calls_dataset = nxt is not None and nxt.f_code.co_name == "__getitem__"
    if calls_dataset:
        if auto is True:
            raw = frames[last_fetch].f_locals.get("idx", _MISSING)
        else:
            raw = batch_raw  # batch_size=None: the sampler's index is passed as it is
        if raw is not _MISSING:
            out["index"] = _plain(raw)
            out["index_known"] = out["index"] is not None
    return out


_MISSING = object()


def _type_name(value: object) -> str | None:
    try:
        name = type(value).__qualname__
        return name[:MAX_TEXT] if isinstance(name, str) else None
    except Exception:
        return None


def _plain_int(v: object) -> int | None:
    return v if type(v) is int else None


def _plain(v: object, depth: int = 0) -> JsonValue:
    """An index as a JSON value: an int, a short string, a small list of those; else
    ``{"type": name}`` (never its repr)."""
    if type(v) is int:
        return v if abs(v) <= 2**53 else str(v)
    if type(v) is str:
        return v[:MAX_TEXT]
    mod = type(v).__module__
    if mod == "numpy" and hasattr(type(v), "__index__"):
        try:
            index: Callable[[object], int] = type(v).__index__  # type: ignore[attr-defined]
            return _plain(int(index(v)), depth)
        except Exception:
            pass
    if mod == "torch" and type(v).__name__ == "Tensor":
        try:
            t = cast("torch.Tensor", v)  # (its type's name and module say so)
            if t.device.type == "cpu" and t.dim() == 0 and not t.is_floating_point():
                return _plain(int(t.item()), depth)
        except Exception:
            pass
    if depth == 0 and type(v) in (list, tuple) and isinstance(v, (list, tuple)):
        if len(v) <= 16:
            return [_plain(x, 1) for x in v]
    return {"type": _type_name(v) or "?"}
