"""Issue #24 (R49, R11): the per-step memory fit, the holder search, the limit reader.

The fit alarms on steady growth only (never a warm-up jump, a plateau, floats or noise);
the search names what grows between two scans from names and metadata alone: it keeps
nothing it found alive and never reads tensor data; the limit comes from the kernel's
cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) or the host's MemAvailable.
"""

from __future__ import annotations

import gc
import random
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from kernel_client import validate_kernel_message
from torch import nn

from jupyterlab_torchdbg.kernel.memory.leak import memory_limit
from jupyterlab_torchdbg.kernel.memory.leak.fit import MiB, Series, fit, steady
from jupyterlab_torchdbg.kernel.memory.leak.holders import compare, filling
from jupyterlab_torchdbg.kernel.memory.leak.limit import ENV, cgroup_limit
from jupyterlab_torchdbg.kernel.memory.leak.scan import scan

# --- the fit --------------------------------------------------------------------------------


def first_alarm(curve: Callable[[int], float], steps: int = 300, noise: float = MiB) -> int | None:
    """Feed ``curve`` step by step (with noise) and fit every 10 steps, as the kernel does."""
    rnd = random.Random(0)
    s = Series("mem/cpu/rss", "rss", None)
    for k in range(1, steps + 1):
        s.add(k, curve(k) + rnd.gauss(0, noise))
        if k % 10 == 0 and steady(s.fit()):
            return k
    return None


BASE = 400 * MiB


def test_steady_growth_alarms_within_the_window() -> None:
    at = first_alarm(lambda k: BASE + k * 512 * 1024)
    assert at is not None and at <= 80
    f = fit([(k, BASE + k * 512 * 1024) for k in range(1, 201)])
    assert f is not None and abs(f.slope - 512 * 1024) < 1 and f.quarters == 4


def test_a_warm_up_jump_never_alarms() -> None:
    assert first_alarm(lambda k: BASE + (300 * MiB if k > 50 else 0)) is None
    assert first_alarm(lambda k: BASE + (300 * MiB if k > 150 else 0)) is None


def test_a_cache_that_stops_growing_never_alarms() -> None:
    assert first_alarm(lambda k: BASE + min(k, 40) * MiB) is None
    assert first_alarm(lambda k: BASE + min(k, 30) * 2 * MiB) is None


def test_floats_and_noise_never_alarm() -> None:
    assert first_alarm(lambda k: BASE + 32 * k) is None  # history.append(loss.item())
    rnd = random.Random(1)
    assert first_alarm(lambda k: BASE + rnd.gauss(0, 50 * MiB)) is None


def test_small_growth_is_not_a_leak() -> None:
    # 64 KiB per step: 12.5 MiB over 200 steps, under the 32 MiB floor
    assert first_alarm(lambda k: BASE + k * 64 * 1024, noise=1024) is None


# --- the holder search -------------------------------------------------------------------


def step_loop(ns: dict[str, Any], steps: int) -> None:
    """A loop leaking in every way the search names, and one that does not."""
    net = ns["net"]
    for _ in range(steps):
        x = torch.randn(4, 8)
        loss = net(x).pow(2).mean()
        ns["total"] = ns["total"] + loss  # keeps every step's graph
        ns["kept"].append(net[0](x))  # a tensor with its graph per step
        ns["floats"].append(loss.item())
        cache = ns["cache"]
        cache.append(x.detach())
        while len(cache) > 5:
            cache.popleft()
        ns["holder"].seen.append(x.detach())
        net(x)  # the forward hook keeps its output


class Holder:
    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []


def namespace() -> dict[str, Any]:
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))

    def make_hook() -> Any:
        outputs: list[torch.Tensor] = []

        def keep(module: nn.Module, inp: Any, out: torch.Tensor) -> None:
            outputs.append(out)

        return keep

    net[2].register_forward_hook(make_hook())
    return {
        "net": net,
        "total": torch.zeros(()),
        "kept": [],
        "floats": [],
        "cache": deque(),
        "holder": Holder(),
        "_private": [],
        "torch": torch,
    }


def test_the_search_names_what_grows_and_nothing_else() -> None:
    ns = namespace()
    step_loop(ns, 20)
    a, done_a = scan(ns, 1.0)
    step_loop(ns, 10)
    b, done_b = scan(ns, 1.0)
    assert done_a and done_b
    holders = {h["name"]: h for h in compare(a, b, 10, per_step=1000.0)}
    assert holders["total"]["kind"] == "graph"
    # 30 steps of graph held: estimated from the nodes added per step, "about"
    assert 20 <= holders["total"]["count"] <= 40
    assert "about" in holders["total"]["text"] and "loss.item()" in holders["total"]["fix"]
    assert holders["kept"]["kind"] == "container" and holders["kept"]["count"] == 30
    assert "growing by 1 per step" in holders["kept"]["text"]
    assert "autograd graph" in holders["kept"]["text"]  # its tensors carry a grad_fn
    assert holders["holder.seen"]["count"] == 30
    hook = [h for h in holders.values() if h["kind"] == "hook"]
    assert len(hook) == 1 and "`keep`" in hook[0]["name"] and "net.2" in hook[0]["name"]
    assert hook[0]["count"] == 2 * 30  # two forwards per step
    # bounded, floats, private: not holders
    assert not {"cache", "floats", "_private"} & set(holders)


def test_one_holder_seen_under_several_names_is_named_once() -> None:
    kept: list[torch.Tensor] = []
    holder, net = Holder(), nn.Linear(4, 4)
    holder.seen = kept

    def remember(t: torch.Tensor) -> None:
        kept.append(t)

    net.register_forward_hook(lambda m, i, o: remember(o))
    total = torch.zeros(())
    ns: dict[str, Any] = {"kept": kept, "alias": kept, "holder": holder, "remember": remember}
    ns.update(net=net, layer=net, total=total)
    scans = []
    for _ in range(2):
        for _ in range(10):
            net(torch.randn(2, 4))
            ns["total"] = ns["total"] + net(torch.randn(2, 4)).sum()
        ns["same_total"] = ns["total"]
        scans.append(scan(ns, 1.0)[0])
    holders = compare(scans[0], scans[1], 10, None)
    assert sorted(h["name"] for h in holders) == ["kept", "total"]


def test_a_bounded_cache_is_no_holder_unless_full_it_would_not_fit() -> None:
    cache: deque[torch.Tensor] = deque(maxlen=50)
    ns: dict[str, Any] = {"cache": cache, "kept": []}

    def steps(n: int) -> None:
        for _ in range(n):
            cache.append(torch.zeros(1024))  # 4 KiB an entry: 200 KiB full
            ns["kept"].append(torch.zeros(1024))

    steps(10)
    a, _ = scan(ns, 1.0)
    steps(10)
    b, _ = scan(ns, 1.0)
    assert b["cache"].bound == 50 and b["cache"].entries == 20
    # full, it takes 30 x 4 KiB more: a cache when that fits (or the limit is unknown)
    assert [h["name"] for h in compare(a, b, 10, None, room=1 << 20)] == ["kept"]
    assert [h["name"] for h in compare(a, b, 10, None, room=None)] == ["kept"]
    note = filling(a, b, 10, room=1 << 20)
    assert len(note) == 1 and "`cache` is a bounded deque filling up (20 of 50" in note[0]
    # ...a leak when it would not
    assert {h["name"] for h in compare(a, b, 10, None, room=64 * 1024)} == {"cache", "kept"}
    assert filling(a, b, 10, room=64 * 1024) == []
    steps(40)  # it filled up in between: the growth may still be its
    c, _ = scan(ns, 1.0)
    assert c["cache"].entries == 50 and "filled up (50 entries" in filling(b, c, 40, 1 << 20)[0]
    assert [h["name"] for h in compare(b, c, 40, None, room=1 << 20)] == ["kept"]
    steps(10)  # full before and after: not its growth (growth elsewhere is not its doing)
    d, _ = scan(ns, 1.0)
    assert filling(c, d, 10, room=1 << 20) == []
    assert [h["name"] for h in compare(c, d, 10, None, room=1 << 20)] == ["kept"]


def test_r49_the_search_keeps_nothing_alive_and_reads_no_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = namespace()
    step_loop(ns, 5)
    leaf = torch.randn(8, requires_grad=True)  # kept only by total's graph
    ns["total"] = ns["total"] + (leaf * 2).sum()
    refs = [weakref.ref(t) for t in ns["kept"]] + [weakref.ref(ns["total"]), weakref.ref(leaf)]
    del leaf

    def forbidden(*args: object, **kwargs: object) -> Any:
        raise AssertionError("tensor data read by the leak search")

    for name in ("item", "tolist", "numpy", "__array__", "__bool__", "__float__", "__repr__"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    monkeypatch.setattr(torch.Tensor, "__eq__", forbidden)
    found, complete = scan(ns, 1.0)
    monkeypatch.undo()
    assert complete and "total" in found and "kept" in found
    del found
    ns.clear()
    gc.collect()
    assert all(r() is None for r in refs)


def test_r49_the_search_stops_at_its_budget() -> None:
    ns = namespace()
    step_loop(ns, 200)
    ticks = iter(range(10**9))
    _found, complete = scan(ns, 3.0, clock=lambda: float(next(ticks)))
    assert not complete  # the clock ran out while walking: what was found so far


def test_r49_the_search_never_raises() -> None:
    class Hostile:
        def __getattribute__(self, name: str) -> Any:
            raise RuntimeError("no")

    bad: list[Any] = [Hostile()]
    found, complete = scan({"h": Hostile(), "bad": bad, 3: "x"}, 1.0)  # type: ignore[dict-item]
    assert complete and found == {}


# --- the limit ---------------------------------------------------------------------------


def fake_root(tmp_path: Path, cgroup: str, files: dict[str, str], avail_kb: int) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/meminfo").write_text(
        f"MemTotal:       99999999 kB\nMemAvailable:   {avail_kb} kB\n"
    )
    for rel, text in files.items():
        p = tmp_path / "sys/fs/cgroup" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_cgroup_v2_limit_and_its_ancestors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    root = fake_root(
        tmp_path,
        "0::/user.slice/kernel.scope\n",
        {
            "user.slice/kernel.scope/memory.max": "max\n",
            "user.slice/memory.max": str(24 << 30) + "\n",
        },
        avail_kb=64 << 20,
    )
    assert cgroup_limit(root) == 24 << 30
    assert memory_limit(1 << 30, root) == (24 << 30, "cgroup")


def test_no_cgroup_limit_means_the_hosts_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    root = fake_root(tmp_path, "0::/\n", {"memory.max": "max\n"}, avail_kb=8 << 20)
    assert cgroup_limit(root) is None
    assert memory_limit(2 << 30, root) == ((2 << 30) + (8 << 30), "host")


def test_cgroup_v1_limit_unless_huge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    root = fake_root(
        tmp_path,
        "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n",
        {"memory/docker/abc/memory.limit_in_bytes": str(4 << 30)},
        avail_kb=64 << 20,
    )
    assert memory_limit(1 << 30, root) == (4 << 30, "cgroup")
    (root / "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes").write_text(
        "9223372036854771712"
    )
    assert cgroup_limit(root) is None


def test_a_host_with_less_left_than_the_cgroup_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    root = fake_root(tmp_path, "0::/k\n", {"k/memory.max": str(32 << 30)}, avail_kb=1 << 20)
    assert memory_limit(1 << 30, root) == (2 << 30, "host")


def test_the_injected_limit_and_unreadable_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "3G")
    assert memory_limit(1 << 30, tmp_path) == (3 << 30, "cgroup")
    monkeypatch.delenv(ENV)
    assert memory_limit(None, tmp_path / "nothing") == (None, None)


# --- LeakWatch with fakes: a CUDA series, the alert once, the guard's re-arm, R11 ------------


class FakeRuns:
    current_id: int | None = 1


class FakeShell:
    def __init__(self) -> None:
        self.user_ns: dict[str, Any] = {}


class FakeHub:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def broadcast(self, msg: dict[str, Any]) -> None:
        self.sent.append(msg)


class FakeExt:
    session_id = "0123456789abcdef"

    def __init__(self) -> None:
        self.runs, self.shell, self.hub = FakeRuns(), FakeShell(), FakeHub()
        self.errors: list[str] = []

    def count_error(self, site: str) -> None:
        self.errors.append(site)


class FakeMon:
    def __init__(self) -> None:
        self.ext = FakeExt()
        self.alloc_reading: Any = None
        self.rss: int | None = None
        self._sent_key: str | None = "x"
        self.published = 0

    def publish(self, immediate: bool = False) -> None:
        self.published += 1


class FakeControl:
    def __init__(self) -> None:
        self.pauses: list[int] = []

    def pause_here(self) -> None:
        self.pauses.append(1)


def cuda_reading(allocated: int, reserved: int) -> Any:
    from jupyterlab_torchdbg.kernel.memory.sources import DeviceReading, Reading

    d = DeviceReading(0, {"allocated": allocated, "reserved": reserved}, {}, {"total": 80 << 30})
    return Reading(True, None, [d])


def test_a_cuda_series_from_the_allocator_samples_is_fitted_and_alerted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jupyterlab_torchdbg.kernel.memory.leak import LeakWatch, watch

    monkeypatch.setattr(watch, "FIT_MIN_S", 0.0)
    mon = FakeMon()
    lw = LeakWatch(mon)
    lw.rss.read = lambda: 1 << 30  # type: ignore[method-assign]
    opt = object()
    for k in range(1, 301):
        if k % 3 == 0:  # the monitor samples the allocator every few steps
            mon.alloc_reading = cuda_reading((1 << 30) + k * (2 << 20), 4 << 30)
        lw.at_step(opt)
    assert mon.ext.errors == []
    leak = lw.leak
    assert leak is not None and leak["series"] == "mem/cuda:0/allocated"
    assert leak["device"] == "cuda:0" and leak["counter"] == "allocated"
    assert leak["limit_source"] == "device" and leak["limit"] == 80 << 30
    assert abs(leak["per_step"] - (2 << 20)) < 1024 and leak["search"] == "done"
    assert "cuda:0 allocated grows 2.0 MiB per step" in leak["text"]
    sent = [a for m in mon.ext.hub.sent for a in m["alerts"]]
    assert [a["kind"] for a in sent] == ["memory_leak"]  # once per run and series
    assert sent[0]["source"] == "memory" and sent[0]["remedy"]
    for m in mon.ext.hub.sent:
        validate_kernel_message(m)


def test_the_guard_trips_once_then_again_only_after_more_growth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jupyterlab_torchdbg.kernel.memory.leak import LeakWatch, limit

    monkeypatch.setenv(limit.ENV, str(1000 << 20))
    mon, control = FakeMon(), FakeControl()
    lw = LeakWatch(mon)
    lw.wire(control, None)
    used = [800 << 20]
    lw.rss.read = lambda: used[0]  # type: ignore[method-assign]
    lw.guard.pause_at = 0.9
    opt = object()
    for _ in range(5):
        lw.at_step(opt)
    assert control.pauses == []  # 80% of the limit
    used[0] = 910 << 20
    for _ in range(5):
        lw.at_step(opt)
    assert len(control.pauses) == 1  # tripped once, not at every step after Resume
    assert lw.guard.tripped is None  # cleared once resumed (pause_here returned)
    used[0] = 930 << 20  # +2%: still held back
    lw.at_step(opt)
    assert len(control.pauses) == 1
    used[0] = 940 << 20  # +3%: again
    lw.at_step(opt)
    assert len(control.pauses) == 2
    sent = [a for m in mon.ext.hub.sent for a in m["alerts"]]
    assert [a["kind"] for a in sent] == ["memory_limit", "memory_limit"]
    assert "91% of the limit" in sent[0]["message"] and "Resume continues" in sent[0]["message"]
    for m in mon.ext.hub.sent:
        validate_kernel_message(m)
    g = lw.guard_json()
    assert g == {"pause_at": 0.9, "limit": 1000 << 20, "limit_source": "cgroup", "tripped": None}


def test_r11_the_watch_never_raises_into_the_step() -> None:
    from jupyterlab_torchdbg.kernel.memory.leak import LeakWatch

    mon = FakeMon()
    mon.alloc_reading = "not a reading"
    lw = LeakWatch(mon)
    lw.at_step(object())  # broken inputs: counted, never raised (R11)
    assert mon.ext.errors == ["memory:leak"]


def test_a_bounded_cache_filling_waits_the_alert_until_it_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RSS grows 1 MiB a step while a ``deque(maxlen=150)`` fills: no alert while it fills
    (the note says why), nor at the search right after it filled up; once it is full
    between two searches and memory still grows, the alert (nothing named)."""
    from jupyterlab_torchdbg.kernel.memory.leak import LeakWatch, limit, watch

    monkeypatch.setenv(limit.ENV, str(64 << 30))
    now = [0.0]
    mon = FakeMon()
    lw = LeakWatch(mon, clock=lambda: now[0])
    cache: deque[torch.Tensor] = deque(maxlen=150)
    mon.ext.shell.user_ns["cache"] = cache
    step = [0]
    lw.rss.read = lambda: (1 << 30) + step[0] * MiB  # type: ignore[method-assign]
    opt = object()
    notes: list[str | None] = []
    while step[0] < 160:
        step[0] += 1
        now[0] += 1.0  # a second a step: the searches' time gates open
        cache.append(torch.zeros(256))
        lw.at_step(opt)
        if lw.leak is not None and lw.leak["search"] != "pending":
            notes.append(lw.leak["search_note"])
    assert mon.ext.errors == [] and mon.ext.hub.sent == []  # filling: no alert
    assert notes and all("bounded deque fill" in (n or "") for n in notes)
    assert lw.leak is not None and lw.leak["holders"] == []
    while step[0] < 260:  # full now, and the memory still grows: a leak elsewhere
        step[0] += 1
        now[0] += 1.0
        cache.append(torch.zeros(256))
        lw.at_step(opt)
    sent = [a for m in mon.ext.hub.sent for a in m["alerts"]]
    assert [a["kind"] for a in sent] == ["memory_leak"]
    assert sent[0]["remedy"].startswith("Find what keeps") and sent[0]["step"] <= 240
    assert lw.leak["search_note"] == watch.NOTHING_FOUND
    for m in mon.ext.hub.sent:
        validate_kernel_message(m)


@pytest.mark.parametrize("bound", [100, 150, 190])
def test_a_bounded_cache_in_a_slow_loop_never_alerts(
    monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    """All the growth is a ``deque(maxlen=bound)`` filling at 1 MiB a step, and the loop is
    slow (a second a step: every search the time gates allow runs): no alert, neither
    while it fills nor at a search between it filling up and the fit seeing the plateau."""
    from jupyterlab_torchdbg.kernel.memory.leak import LeakWatch, limit

    monkeypatch.setenv(limit.ENV, str(64 << 30))
    now = [0.0]
    mon = FakeMon()
    lw = LeakWatch(mon, clock=lambda: now[0])
    cache: deque[torch.Tensor] = deque(maxlen=bound)
    mon.ext.shell.user_ns["cache"] = cache
    lw.rss.read = lambda: (1 << 30) + len(cache) * MiB  # type: ignore[method-assign]
    opt, searched = object(), 0
    for _ in range(450):
        now[0] += 1.0
        cache.append(torch.zeros(256))
        lw.at_step(opt)
        searched = max(searched, len(lw._scans))
    assert searched == 2 and mon.ext.errors == []  # the search ran, and judged it a cache
    assert mon.ext.hub.sent == [] and lw.leak is None
