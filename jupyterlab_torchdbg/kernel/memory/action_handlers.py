"""The memory panel's action handlers (allowlisted, one reply each; arguments checked in
``action_args`` first).

- ``empty_cache`` ``{}``: ``torch.cuda.empty_cache()``; the ack has reserved bytes before
  and after per device. After a sticky CUDA error: refused, "CUDA context is corrupted —
  restart the kernel" (R22).
- ``release_refs`` ``{}``: drop what keeps the last failure's frames alive
  (``sys.last_value/last_traceback/last_type/last_exc``, IPython's
  ``InteractiveTB.tb`` and ``last_execution_result``), IPython's output caches (``Out``,
  ``_``, ``__``, ``___``, ``_N``), clear those frames' locals, ``gc.collect()``, then empty
  the CUDA cache; before/after in the ack, with the note that ``%debug`` on the last error
  is no longer possible (R23).
- ``record_memory`` ``{"op": "start", "max_entries"?}`` / ``{"op": "stop"}``: the
  allocator's memory history (see recording.py).
- ``save_checkpoint`` ``{"filename"?, "overwrite"?}``: ``torch.save`` of the found models'
  and optimizers' state dicts to a plain file name in the kernel's working directory;
  an existing file is never replaced unless ``overwrite`` is true (a default name is
  made unique with a ``-N`` suffix instead).
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

from ..action_registry import ActionError
from ..oom_text import sticky_cuda_error
from .sources import Number

if TYPE_CHECKING:
    from .monitor import MemoryMonitor


class CacheRow(TypedDict):
    """One device's bytes before and after emptying the cache."""

    device: str
    allocated_before: int
    allocated_after: int
    reserved_before: int
    reserved_after: int


DEBUG_NOTE = (
    "%debug on the last error is no longer possible: its traceback and frames were released."
)


class MemoryActions:
    def __init__(self, monitor: MemoryMonitor) -> None:
        self.mon = monitor

    def _cuda(self) -> ModuleType:
        """torch when CUDA may be touched now; refused otherwise (never initialises it)."""
        if self.mon.corrupted:
            raise ActionError(self.mon.corrupted, "refused")
        torch = sys.modules.get("torch")
        if torch is None:
            raise ActionError("torch is not imported in this kernel", "refused")
        if not getattr(getattr(torch, "version", None), "cuda", None):
            raise ActionError("no CUDA: this torch build is CPU-only", "refused")
        if not torch.cuda.is_initialized():
            raise ActionError(
                "CUDA is not initialised in this kernel: there is no cache to empty", "refused"
            )
        return torch

    def _devices(self) -> dict[int, dict[str, Number | None]]:
        r = self.mon.allocator.read()
        if not r.available:
            return {}
        return {d.index: dict(d.values) for d in r.devices}

    def _empty(self, torch: ModuleType) -> None:
        try:
            torch.cuda.empty_cache()
        except Exception as e:
            kind = sticky_cuda_error(str(e))
            if kind is not None:
                self.mon.mark_corrupted(kind)
                why = self.mon.corrupted or "CUDA context is corrupted"
                raise ActionError(why, "refused") from None
            raise

    def empty_cache(self, args: dict[str, object]) -> dict[str, object]:
        torch = self._cuda()
        before = self._devices()
        self._empty(torch)
        after = self._devices()
        rows = _before_after(before, after)
        self.mon.after_action()
        return {
            "devices": rows,
            "freed_bytes": sum(max(0, r["reserved_before"] - r["reserved_after"]) for r in rows),
        }

    def release_refs(self, args: dict[str, object]) -> dict[str, object]:
        mon = self.mon
        torch = sys.modules.get("torch")
        cuda_ok = bool(
            torch is not None
            and not mon.corrupted
            and getattr(getattr(torch, "version", None), "cuda", None)
            and torch.cuda.is_initialized()
        )
        before = self._devices() if cuda_ok else {}
        rss_before, _ = mon.host.rss()
        cleared: list[str] = []
        tbs = []
        for attr in ("last_traceback", "last_value", "last_type", "last_exc"):
            v = getattr(sys, attr, None)
            if attr == "last_traceback" and v is not None:
                tbs.append(v)
            if hasattr(sys, attr):
                # Deleted, not set to None: `%debug` then says "No traceback has been
                # produced" instead of failing on a None traceback.
                delattr(sys, attr)
                if v is not None:
                    cleared.append(f"sys.{attr}")
        del v
        shell = mon.ext.shell
        itb = getattr(shell, "InteractiveTB", None)
        if itb is not None and getattr(itb, "tb", None) is not None:
            tbs.append(itb.tb)
            itb.tb = None  # IPython's formatter keeps the last traceback for %debug
            cleared.append("InteractiveTB.tb")
        result = getattr(shell, "last_execution_result", None)
        if getattr(result, "error_in_exec", None) is not None:
            shell.last_execution_result = None  # its exception holds the traceback too
            cleared.append("last_execution_result")
        del result
        hook = getattr(shell, "displayhook", None)
        if (
            hook is not None
            and getattr(hook, "do_full_cache", False)
            and callable(getattr(hook, "flush", None))
        ):
            hook.flush()  # Out, _, __, ___ and _N (what `%reset -f out` does)
            cleared.append("Out/_/__/___")
        for tb in tbs:
            try:
                # Locals of finished frames go now, even if something else still holds
                # the traceback (an `err` variable, a logging handler).
                traceback.clear_frames(tb)
            except Exception:
                pass
        del tbs
        collected = gc.collect()
        if cuda_ok and torch is not None:
            self._empty(torch)
        after = self._devices() if cuda_ok else {}
        rss_after, _ = mon.host.rss()
        mon.after_action()
        return {
            "cleared": cleared,
            "collected": collected,
            "devices": _before_after(before, after),
            "rss_before": rss_before,
            "rss_after": rss_after,
            "note": DEBUG_NOTE,
        }

    def record_memory(self, args: dict[str, object]) -> dict[str, object]:
        rec = self.mon.recorder
        n = args.get("max_entries")  # an int for op "start" (validate_record)
        result = rec.start(n) if args["op"] == "start" and isinstance(n, int) else rec.stop()
        self.mon._sent_key = None
        self.mon.publish(immediate=True)
        return result

    def save_checkpoint(self, args: dict[str, object]) -> dict[str, object]:
        return dict(
            self.mon.at_safe_point(
                # a str and bools (validate_checkpoint): str() and bool() return them as they are
                lambda: self._save(
                    str(args["filename"]), bool(args["overwrite"]), bool(args.get("unique", False))
                )
            )
        )

    def _save(self, filename: str, overwrite: bool, unique: bool = False) -> dict[str, object]:
        torch = sys.modules.get("torch")
        if torch is None:
            raise ActionError("torch is not imported in this kernel", "refused")
        found = self.mon.found()
        if not found.models and not found.optimizers:
            raise ActionError(
                "nothing to save: no nn.Module or optimizer in the notebook's namespace "
                "(or watch() one)",
                "refused",
            )
        if unique:  # a default name: the next free one, never an existing file
            filename = _free_name(os.getcwd(), filename)
        path = os.path.join(os.getcwd(), filename)
        exists = os.path.exists(path)
        if exists and not overwrite:
            raise ActionError(
                f"{filename} already exists: choose another name (or overwrite it explicitly)",
                "refused",
            )
        payload = {
            "models": {name: m.state_dict() for name, m in found.models},
            "optimizers": {name: o.state_dict() for name, o in found.optimizers},
            "saved_by": "jupyterlab_torchdbg",
            "time": time.time(),
        }
        # Replacing: write beside the target and rename, so an interrupted save never
        # destroys the checkpoint it replaces. A new file: O_EXCL, so a name that appeared
        # meanwhile is never replaced. 0600 either way (S6).
        target = os.path.join(os.getcwd(), f".{filename}.{os.getpid()}.tmp") if overwrite else path
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ActionError(f"{filename} already exists", "refused") from None
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(payload, f)
            if overwrite:
                os.replace(target, path)
        except BaseException:
            try:
                os.unlink(target)
            except OSError:
                pass
            raise
        del payload
        return {
            "file": filename,
            "bytes": os.path.getsize(path),
            "models": [k for k, _ in found.models],
            "optimizers": [k for k, _ in found.optimizers],
            "overwritten": exists,
        }


def _free_name(directory: str, filename: str) -> str:
    """``filename``, or ``stem-2.pt``, ``stem-3.pt``... whichever does not exist yet."""
    stem, ext = os.path.splitext(filename)
    name, n = filename, 1
    while os.path.exists(os.path.join(directory, name)):
        n += 1
        name = f"{stem}-{n}{ext}"
    return name


def _before_after(
    before: dict[int, dict[str, Number | None]], after: dict[int, dict[str, Number | None]]
) -> list[CacheRow]:
    rows: list[CacheRow] = []
    for i in sorted(set(before) | set(after)):
        b, a = before.get(i, {}), after.get(i, {})
        rows.append(
            {
                "device": f"cuda:{i}",
                "allocated_before": int(b.get("allocated") or 0),
                "allocated_after": int(a.get("allocated") or 0),
                "reserved_before": int(b.get("reserved") or 0),
                "reserved_after": int(a.get("reserved") or 0),
            }
        )
    return rows
