"""``log()``'s packed rows (``stream.packed``) and the stream's sending budget (``budget``).

Correctness only (no timings): rows packed as float32 arrive exactly as the panel decodes
them, through decimated history and snapshots, bounded pending buffers and mixed row
kinds; the block a layout keeps is never a forgotten one; the flush interval stretches
with the measured cost of a flush and every point still arrives in order; the wide
``log()`` path needs no torch.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from array import array
from typing import Any

import pytest
import torch
from grads_support import FakeComm

from jupyterlab_torchdbg import log, testing
from jupyterlab_torchdbg.kernel.stream import Stream, budget, limits
from jupyterlab_torchdbg.kernel.stream.history import BlockHistory
from jupyterlab_torchdbg.kernel.stream.packed import PackedRows
from jupyterlab_torchdbg.kernel.stream.series import BlockSeries


def _rows(n: int, width: int, start: int = 0) -> PackedRows:
    return PackedRows(array("f", range(start, start + n * width)).tobytes(), width)


def _names(n: int, prefix: str = "p") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def _pack(width: int) -> Any:
    import struct

    return struct.Struct(f"{width}f")


def test_packed_rows_slice_join_and_bytes() -> None:
    r = _rows(5, 3)
    assert r.shape == (5, 3) and len(r) == 5
    assert r[1:4].values() == list(range(3, 12))
    assert r[::2].values() == [0, 1, 2, 6, 7, 8, 12, 13, 14]
    assert r[4:1].shape == (0, 3)
    assert PackedRows.join([r[:2], r[2:]], 3).values() == r.values()
    assert bytes(r.le_bytes()) == array("f", range(15)).tobytes()
    assert r.tensor().tolist() == torch.arange(15.0).view(5, 3).tolist()
    assert PackedRows(b"", 3).tensor().shape == (0, 3)
    with pytest.raises(ValueError):
        PackedRows(b"\0" * 10, 3)


def test_block_history_of_packed_rows_decimates_like_tensor_rows(monkeypatch) -> None:
    monkeypatch.setattr(limits, "HISTORY_CAPACITY", 8)
    packed, tensor = BlockHistory(2), BlockHistory(2)
    for k in range(7):  # 21 rows in uneven flushes, past the capacity twice
        xs = [float(3 * k + i) for i in range(3)]
        rows = _rows(3, 2, start=6 * k)
        packed.add(xs, rows)
        tensor.add(xs, rows.tensor())
    assert list(packed.x) == list(tensor.x) and len(packed) <= 8
    assert bytes(packed.y_bytes()) == bytes(tensor.y_bytes())
    assert type(packed.rows()) is PackedRows  # no torch for a log() block's history
    # chunks of both kinds join as a tensor, in order
    mixed = BlockHistory(2)
    mixed.add([0.0, 1.0], _rows(2, 2))
    mixed.add([2.0], torch.tensor([[7.0, 8.0]]))
    assert mixed.rows().tolist() == [[0.0, 1.0], [2.0, 3.0], [7.0, 8.0]]
    assert bytes(mixed.y_bytes()) == array("f", [0, 1, 2, 3, 7, 8]).tobytes()


def test_record_packed_grows_drops_the_oldest_and_keeps_order_with_other_rows(
    monkeypatch,
) -> None:
    monkeypatch.setattr(limits, "BLOCK_PENDING_ROWS", 20)
    b = BlockSeries(("a", "b"))
    pack = _pack(2)
    for i in range(25):  # past the first buffer (8 rows) and past the bound
        b.record_packed(pack, (float(i), i * 10), float(i))
    xs, m = b.collect(b.take_pending(), wait=True) or ([], None)
    assert xs == [float(i) for i in range(5, 25)]
    assert m.values() == [v for i in range(5, 25) for v in (i, i * 10)]
    # then packed, tensor, packed: one message, in the order recorded
    b.record_packed(pack, (1.0, 2.0), 30.0)
    b.record(torch.tensor([3.0, 4.0]), 31.0)
    b.record_packed(pack, (5.0, 6.0), 32.0)
    p = b.take_pending()
    assert p.dropped == 0
    xs, m = b.collect(p, wait=True) or ([], None)
    assert xs == [30.0, 31.0, 32.0]
    assert m.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


def test_float32_rows_round_like_torch_and_keep_non_finite_values() -> None:
    names = _names(16)
    values = [1e300, -1e300, math.nan, math.inf, 0.1, 3, -7, 2**70] + [1.5] * 8
    comm = FakeComm()
    with testing.loaded_extension(comm=comm) as loaded:
        log(1, **dict(zip(names, values, strict=True)))
        loaded.ext.stream.flush()
    announced = [b["names"] for d in comm.messages("series") for b in d["blocks"] if "names" in b]
    assert names in announced  # one row of one block
    got = comm.series()
    want = torch.tensor([float(v) for v in values], dtype=torch.float64).float().tolist()
    for n, w in zip(names, want, strict=True):  # ±Inf past the range, NaN, 0.1 rounded
        (v,) = got[n][1].tolist()
        assert v == w or (math.isnan(v) and math.isnan(w)), (n, v, w)


def test_the_kept_block_is_never_a_forgotten_one(monkeypatch) -> None:
    names = _names(20)
    comm = FakeComm()
    with testing.loaded_extension(comm=comm) as loaded:
        stream = loaded.ext.stream
        log(1, **dict.fromkeys(names, 1.0))
        first = stream.block(names, per_run=True)
        stream.clear()  # the panel's "clear history": the block is forgotten
        log(2, **dict.fromkeys(names, 2.0))
        second = stream.block(names, per_run=True)
        assert second is not first and second.id != first.id
        log(1, **dict.fromkeys(names, 3.0))  # the step went back: a new run, a new block
        third = stream.block(names, per_run=True)
        assert third is not second and third.run != second.run
        stream.flush()
        monkeypatch.setattr(limits, "MAX_BLOCK_NAMES", 25)
        stream.block(_names(10, "other"))  # makes room: the log() block is forgotten
        log(2, **dict.fromkeys(names, 4.0))
        fourth = stream.block(names, per_run=True)
        assert fourth is not third
        stream.flush()
    got = comm.series()
    sent_ids = {b["id"] for d in comm.messages("series") for b in d["blocks"]}
    assert {second.id, third.id, fourth.id} <= sent_ids and first.id not in sent_ids
    assert sorted(got[names[0]][1].tolist()) == [2.0, 3.0, 4.0]


def test_budget_slowdown_follows_the_cost_within_its_bounds() -> None:
    interval = 0.1
    share = limits.SEND_BUDGET * interval
    assert budget.slowdown(share / 2, interval) == 1.0
    assert budget.slowdown(2 * share, interval) == pytest.approx(2.0)
    assert budget.slowdown(100 * share, interval) == limits.MAX_SEND_SLOWDOWN
    assert budget.slowdown(1.0, 0.0) == 1.0  # interval 0: flush every time
    assert budget.mean_cost(None, 3.0) == 3.0
    # an outlier counts as at most four means
    assert budget.mean_cost(1.0, 1000.0) == pytest.approx(1 + limits.SEND_COST_ALPHA * 3)


def test_costly_flushes_are_spread_out_and_every_point_still_arrives() -> None:
    now = [0.0]
    sent: list[dict[str, Any]] = []
    cost = 3 * limits.SEND_BUDGET * 0.1  # three times what the budget allows

    def send(header: dict[str, Any], buffers: Any) -> None:
        now[0] += cost  # the send takes time on the stream's clock
        sent.append(header)

    s = Stream(send, interval_s=0.1, clock=lambda: now[0])
    for i in range(10_000):
        now[0] += 0.0002  # 5,000 records per second for about 2 s
        s.record("loss", float(i))
        s.maybe_flush()
    s.flush()
    assert s.send_slowdown == pytest.approx(3.0)
    assert s.flush_interval_s == pytest.approx(0.3)
    assert 6 <= len(sent) <= 9  # about 3 a second instead of 10
    assert [h["seq"] for h in sent] == list(range(1, len(sent) + 1))
    assert sum(b["count"] for h in sent for b in h["blocks"]) == 10_000
    s.slowdown = 5.0  # the gradient monitor's own slowdown applies when larger
    assert s.flush_interval_s == pytest.approx(0.5)


def test_wide_log_streams_without_importing_torch() -> None:
    code = textwrap.dedent(
        """
        import sys
        from jupyterlab_torchdbg import log, testing
        comm = testing.FakeComm()
        with testing.loaded_extension(comm=comm) as loaded:
            for step in range(100):
                log(step, **{f"m{i}": step + i / 8 for i in range(64)})
            loaded.ext.stream.flush()
            snap = loaded.ext.stream.snapshot()
        assert comm.points == 6400 and comm.gaps == 0 and comm.unknown_blocks == 0, comm
        assert len(snap[0]) == 1 and snap[0][0]["count"] == 100
        print("torch" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
