"""``LeakWatch``: the per-step fit, the holder search, the alert and the guard, per run.

The memory monitor's ``after_step`` calls ``at_step`` on the training thread: an O(1)
append of this step's RSS (``/proc/self/statm`` through a kept descriptor) and, when the
monitor took a new allocator sample, each CUDA device's allocated bytes (never
initialising CUDA); every ``FIT_EVERY`` steps the fit (fit.py). When a series grows
steadily, the holder search (scan.py) runs at this boundary, on the training thread
(R36: no background thread touches tensors), on a ``SEARCH_BUDGET_S`` time budget, twice
``SEARCH_GAP`` steps apart and then rarely (R49); the second search names the holders and
the ``memory_leak`` alert is raised, once per run and series (not while the only growth
found is a bounded cache filling up: holders.py). Nothing raises into the
user's step (R11): ``at_step`` counts its errors.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ....protocol import jsonable
from ...action_args import only_keys, schema_number
from ...runs import name_of
from .alert import MemoryAlert
from .fit import MIN_POINTS, Fit, Series, steady
from .guard import Guard
from .holders import compare, filling
from .limit import memory_limit
from .rss import RssReader
from .scan import Seen, scan
from .text import GENERIC_FIX, headline

if TYPE_CHECKING:
    from ....protocol.messages import LeakHolder, MemoryGuard, MemoryLeak
    from ....protocol.messages import MemoryLeakCounter as Counter
    from ....protocol.messages import MemoryLeakLimitSource as LimitSource
    from ....protocol.messages import MemoryLeakSearch as Search
    from ...host import Host
    from ..sources import Reading

#: Steps between two fits, and seconds at least (a fit of 200 points costs ~0.1 ms: at
#: most ~0.3% of a fast loop's time).
FIT_EVERY = 10
FIT_MIN_S = 0.05
#: Time one holder search may take (it stops there, with what it found so far).
SEARCH_BUDGET_S = 0.2
#: Steps between the first two searches (their difference names the holders).
SEARCH_GAP = 16
#: Later searches (refreshing the holders' numbers): every this many steps, when at least
#: ``SEARCH_AGAIN_S`` and ``SEARCH_SHARE`` of the time since the last allow.
SEARCH_AGAIN_STEPS = 50
SEARCH_AGAIN_S = 5.0
SEARCH_SHARE = 0.01
#: Points a CUDA series (one per allocator sample) needs.
CUDA_MIN_POINTS = 12
#: How long a limit reading is reused.
LIMIT_TTL_S = 1.0
#: The holder search's state (the protocol's ``MemoryLeak.search``).
NOTHING_FOUND = (
    "nothing the notebook's names hold grows with the steps: the memory may be held "
    "inside a library or a C extension, by a local of a running function, or by the allocator"
)


class MemoryMonitor(Protocol):
    """What the watch uses of ``monitor.MemoryMonitor`` (no import: it owns the watch)."""

    ext: Host
    alloc_reading: Reading | None
    rss: int | None
    _sent_key: str | None

    def publish(self, immediate: bool = False) -> None: ...


class Pauser(Protocol):
    """The training controller's pause (``control.Control``, handed over by the wiring)."""

    def pause_here(self) -> None: ...


class LeakWatch:
    def __init__(self, mon: MemoryMonitor, clock: Callable[[], float] = time.monotonic) -> None:
        self.mon = mon
        self.ext: Host = mon.ext
        self._clock = clock
        self.guard = Guard()
        #: ``TORCHDBG_LEAK=0`` turns the per-step tracking off (the bench's reference).
        self.off = os.environ.get("TORCHDBG_LEAK") == "0"
        #: Wired by the extension: ``Control`` (its ``pause_here``) and the alert log.
        self.control: Pauser | None = None
        # Any: the gradient AlertLog, which takes MemoryAlerts duck-typed as its Alerts
        self.alerts: Any = None
        self.rss = RssReader()
        self.run: int | None = None
        self.step = 0
        self._primary: int | None = None
        self.series: dict[str, Series] = {}
        self._alloc_seen: object = None
        self._next_fit, self._next_fit_t = FIT_EVERY, -math.inf
        #: The ``memory.leak`` value (replaced whole: the poller reads it).
        self.leak: MemoryLeak | None = None
        self._leak_series: str | None = None
        self._scans: list[tuple[int, dict[str, Seen]]] = []
        self._next_search: int | None = None
        self._searched_at = -math.inf
        self._search_cost = 0.0
        self._search: tuple[Search, str | None] = ("pending", None)
        self._holders: list[LeakHolder] = []
        self._alerted: set[str] = set()
        self._n_alerts = 0
        self._limit_at = -math.inf
        self._limit: tuple[int | None, LimitSource | None] = (None, None)

    # Any: see ``alerts`` above
    def wire(self, control: Pauser | None, alerts: Any) -> None:
        self.control, self.alerts = control, alerts

    def close(self) -> None:
        self.rss.close()

    # --- the training thread ----------------------------------------------------------

    def at_step(self, optimizer: object) -> None:
        if self.off:
            return
        try:
            self._at_step(optimizer)
        except Exception:
            self.ext.count_error("memory:leak")

    def _at_step(self, optimizer: object) -> None:
        run = self.ext.runs.current_id
        if run != self.run:
            self._new_run(run)
        if self._primary is None:
            self._primary = id(optimizer)
        elif id(optimizer) != self._primary:
            return  # one point per training step, when several optimizers step
        self.step += 1
        rss = self.rss.read()
        if rss is not None:
            self._add("mem/cpu/rss", "rss", None, rss)
        r = self.mon.alloc_reading
        if r is not None and r is not self._alloc_seen and r.available:
            self._alloc_seen = r
            for d in r.devices:
                v = d.values.get("allocated")
                if v is not None:
                    self._add(f"mem/cuda:{d.index}/allocated", "allocated", f"cuda:{d.index}", v)
        if self.step >= self._next_fit and (now := self._clock()) >= self._next_fit_t:
            self._next_fit, self._next_fit_t = self.step + FIT_EVERY, now + FIT_MIN_S
            self._fit(optimizer)
        if self._next_search is not None and self.step >= self._next_search:
            self._search_now(optimizer)
        if self.guard.pause_at is not None:
            self._check_guard(rss, optimizer)

    def _new_run(self, run: int | None) -> None:
        self.run, self.step, self._primary = run, 0, None
        self.series.clear()
        self._next_fit = FIT_EVERY
        self._alerted.clear()
        self._drop_leak()

    def _drop_leak(self) -> None:
        self.leak, self._leak_series = None, None
        self._scans, self._next_search, self._holders = [], None, []
        self._search = ("pending", None)

    def _add(self, name: str, counter: Counter, device: str | None, value: float) -> None:
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Series(name, counter, device)
        s.add(self.step, float(value))

    # --- limits ---------------------------------------------------------------------------

    def host_limit(self, used: int | None) -> tuple[int | None, LimitSource | None]:
        now = self._clock()
        if now - self._limit_at > LIMIT_TTL_S:
            self._limit_at, self._limit = now, memory_limit(used)
        return self._limit

    def _device_total(self, device: str | None) -> int | None:
        r = self.mon.alloc_reading
        if r is None or not r.available or device is None:
            return None
        for d in r.devices:
            if f"cuda:{d.index}" == device:
                total = d.info.get("total")
                return int(total) if isinstance(total, int) else None
        return None

    def limit_for(self, s: Series, used: float) -> tuple[int | None, LimitSource | None]:
        if s.device is None:
            return self.host_limit(int(used))
        total = self._device_total(s.device)
        return (total, "device") if total else (None, None)

    # --- the fit -------------------------------------------------------------------------

    def _fit(self, optimizer: object) -> None:
        best: tuple[float, Series, Fit] | None = None
        for s in self.series.values():
            f = s.fit()
            need = MIN_POINTS if s.device is None else CUDA_MIN_POINTS
            if f is None or not steady(f, min_points=need):
                continue
            limit, _ = self.limit_for(s, f.used)
            left = (limit - f.used) / f.slope if limit else math.inf
            if best is None or left < best[0]:
                best = (left, s, f)
        if best is None:
            if self._leak_series is not None:
                self._drop_leak()
            return
        _, s, f = best
        if s.name != self._leak_series:
            self._drop_leak()
            self._leak_series = s.name
            self._next_search = self.step  # now, at this boundary
        self.leak = self._leak(s, f)

    def _leak(self, s: Series, f: Fit) -> MemoryLeak:
        limit, source = self.limit_for(s, f.used)
        left = max(0, int((limit - f.used) / f.slope)) if limit else None
        text = headline(
            counter=s.counter,
            device=s.device,
            per_step=f.slope,
            err=f.err,
            steps=f.steps,
            used=f.used,
            limit=limit,
            source=source,
            steps_left=left,
        )
        state, note = self._search
        return {
            "series": s.name,
            "counter": s.counter,
            "device": s.device,
            "per_step": round(f.slope, 1),
            "per_step_err": round(f.err, 1),
            "steps": f.steps,
            "run": self.run,
            "step": self.step,
            "used": int(f.used),
            "limit": limit,
            "limit_source": source if limit else None,
            "steps_left": left,
            "holders": list(self._holders),
            "search": state,
            "search_note": note,
            "text": text,
        }

    # --- the holder search (R49) -------------------------------------------------------

    def _search_now(self, optimizer: object) -> None:
        self._next_search = None
        t0 = self._clock()
        if len(self._scans) >= 2 and t0 - self._searched_at < max(
            SEARCH_AGAIN_S, self._search_cost / SEARCH_SHARE
        ):
            self._next_search = self.step + SEARCH_AGAIN_STEPS  # a refresh, not yet
            return
        ns = getattr(self.ext.shell, "user_ns", None)
        leak = self.leak
        try:
            found, complete = scan(ns if isinstance(ns, dict) else {}, SEARCH_BUDGET_S, self._clock)
        except Exception as e:
            self.ext.count_error("memory:leak_search")
            self._search = ("failed", f"the holder search failed ({type(e).__name__})")
            del e
            self._finish(optimizer)
            return
        self._searched_at = self._clock()
        self._search_cost = self._searched_at - t0
        self._scans = [*self._scans[-1:], (self.step, found)]
        if len(self._scans) < 2:
            self._next_search = self.step + SEARCH_GAP
            return
        (s0, before), (s1, after) = self._scans
        per_step = leak["per_step"] if leak is not None else None
        room = leak["limit"] - (leak["used"] or 0) if leak is not None and leak["limit"] else None
        self._holders = compare(before, after, s1 - s0, per_step, room)
        # only bounded caches filling up (that fit): the alert waits for the next search
        caches = [] if self._holders else filling(before, after, s1 - s0, room)
        note = None if self._holders else ("; ".join(caches) or NOTHING_FOUND)
        if not complete:
            note = "the search stopped at its time budget: these are the holders found so far"
        self._search = ("done" if complete else "budget", note)
        self._next_search = self.step + SEARCH_AGAIN_STEPS
        self._finish(optimizer, wait=bool(caches))

    def _finish(self, optimizer: object, wait: bool = False) -> None:
        """A search ended: the leak shows its holders; the alert, once per run and series
        (``wait``: not yet, only bounded caches were seen filling up)."""
        name = self._leak_series
        if self.leak is not None:
            state, note = self._search
            holders = list(self._holders)
            self.leak = {**self.leak, "holders": holders, "search": state, "search_note": note}
        if wait or self.leak is None or name is None or name in self._alerted:
            return
        self._alerted.add(name)
        first = self._holders[0] if self._holders else None
        message = self.leak["text"]
        if first is not None:
            message += f". {first['text'][:1].upper()}{first['text'][1:]}"
        remedy = (first["fix"] if first is not None else None) or GENERIC_FIX
        self.raise_alert("memory_leak", message, remedy, optimizer, self.leak["per_step"])

    def raise_alert(
        self, kind: str, message: str, remedy: str, optimizer: object, value: float | None
    ) -> None:
        self._n_alerts += 1
        ns = getattr(self.ext.shell, "user_ns", None) or {}
        a = MemoryAlert(
            kind=kind,
            message=message,
            remedy=remedy[:1].upper() + remedy[1:],
            step=self.step,
            track=name_of(optimizer, ns),
            value=value,
            id=f"memory-{self.ext.session_id[:8]}-{self._n_alerts}",
            run=self.run,
        )
        log = self.alerts
        out = [a]
        if log is not None:
            log.add([a])
            out = log.take(True)
        if out:
            msg = {"method": "alert", "alerts": [x.to_json() for x in out]}
            self.ext.hub.broadcast(jsonable(msg))
        if self.mon is not None:
            self.mon._sent_key = None  # the leak's holders go out with the next status

    # --- the guard -------------------------------------------------------------------------

    def _check_guard(self, rss: int | None, optimizer: object) -> None:
        g = self.guard
        candidates: list[tuple[float, float, int, LimitSource | None, str]] = []
        if rss is not None:
            limit, source = self.host_limit(rss)
            if limit:
                candidates.append((rss / limit, float(rss), limit, source, "The kernel's RSS"))
        r = self.mon.alloc_reading
        if r is not None and r.available:
            for d in r.devices:
                used, total = d.values.get("reserved"), d.info.get("total")
                if isinstance(used, int) and isinstance(total, int) and total > 0:
                    what = f"cuda:{d.index} reserved memory"
                    candidates.append((used / total, float(used), total, "device", what))
        if not candidates:
            return
        _, used, limit, source, what = max(candidates, key=lambda c: c[0])
        g.limit, g.source = limit, source
        if not g.due(used, limit) or self.control is None:
            return
        text = g.trip(used, limit, source, what, self.step)
        remedy = "Resume continues; free memory (or save a checkpoint) first."
        self.raise_alert("memory_limit", text, remedy, optimizer, used)
        self.mon._sent_key = None
        self.mon.publish(immediate=True)
        try:
            self.control.pause_here()
        finally:
            g.tripped = None
            self.mon._sent_key = None
            self.mon.publish(immediate=True)

    def guard_json(self) -> MemoryGuard:
        g = self.guard
        if g.limit is None:
            limit, source = self.host_limit(self.mon.rss)
            return {**g.to_json(), "limit": limit, "limit_source": source}
        return g.to_json()

    def act_set_guard(self, args: dict[str, object]) -> dict[str, object]:
        """``set_memory_guard {pause_at}`` (any thread); ack ``{guard}``."""
        pause_at = args["pause_at"]  # a number or None (validate_guard)
        self.guard.set(pause_at if isinstance(pause_at, (int, float)) else None)
        self.guard.limit, self._limit_at = None, -math.inf  # read the limit afresh
        self.mon._sent_key = None
        self.mon.publish(immediate=True)
        return {"guard": self.guard_json()}


def validate_guard(args: dict[str, object]) -> dict[str, object]:
    only_keys(args, {"pause_at"})
    return {"pause_at": schema_number(args, "set_memory_guard", "pause_at")}
