"""A rank's per-layer norms on the wire (ranks/wire/packed.py): one string, exact, NaN and
the infinities included; garbage refused; the kernel keeps what a report sent and reads
it only when asked (the desync alarm's layer, the panel's layers with few ranks), so
hundreds of layers in every report cost it a string, not hundreds of numbers; the names
travel only when the kernel may lack them, and norms are never read under another
layout's names (R56, issue #25)."""

from __future__ import annotations

import base64
import json
import math
import time

import zmq
from test_ranks_job import Harness

from jupyterlab_torchdbg import ranks_sim as sim
from jupyterlab_torchdbg.ranks.kernel.rank import MAX_LAYERS_IN
from jupyterlab_torchdbg.ranks.wire import transport as wire
from jupyterlab_torchdbg.ranks.wire.packed import layout_of, pack, unpack
from jupyterlab_torchdbg.ranks.worker.agent import Agent
from jupyterlab_torchdbg.ranks.worker.cadence import NAMES_EVERY


def test_packed_norms_come_back_exactly() -> None:
    values = [0.1, 1e-300, 3.4028234663852886e38, 0.0, -0.0, math.nan, math.inf, -math.inf]
    back = unpack(pack(values), 8)
    assert back is not None and len(back) == 8
    for a, b in zip(values, back, strict=True):
        same_sign = math.copysign(1, a) == math.copysign(1, b)
        assert (math.isnan(a) and math.isnan(b)) or (a == b and same_sign)
    assert unpack(pack([]), 0) == []


def test_what_is_not_packed_norms_is_refused() -> None:
    good = pack([1.0, 2.0, 3.0])
    assert unpack(good, 2) is None  # more than the limit
    assert unpack(good[:-4] + "!!!!", 3) is None  # not base64
    assert unpack(base64.b64encode(b"1234567").decode(), 3) is None  # not whole doubles
    assert unpack([1.0, 2.0], 3) is None and unpack(None, 3) is None
    assert unpack("A" * (4 * MAX_LAYERS_IN * 8), MAX_LAYERS_IN) is None  # too long to read


def _layers(
    step: int, values: list[float], names: list[str] | None = None, named: bool = True
) -> dict[str, object]:
    names = names or [f"model.{i}" for i in range(len(values))]
    out = {"step": step, "layout": layout_of(names), "packed": pack(values)}
    return {**out, "names": names} if named else out


def test_the_kernel_reads_a_ranks_layers_only_when_asked() -> None:
    h = Harness()
    h.hello(0)
    rank = h.hub.jobs[-1].ranks[0]
    values = [0.001 * (i + 1) for i in range(300)]
    h.rows(0, range(1, 4), layers=_layers(3, values))
    assert rank._layers_read == {}  # kept as sent: nothing decoded yet
    at = rank.layers_at(3)
    assert at is not None and at["norms"] == values and at["names"][299] == "model.299"
    assert rank.layers_at(3) is at  # read once
    assert rank.layers_at(2) is None  # no report for that step
    h.rows(0, range(4, 5), layers=_layers(4, [1.0, math.nan, 2.0], ["a", "b", "c"]))
    assert rank.layers_at(4) == {"step": 4, "names": ["a", "b", "c"], "norms": [1.0, "NaN", 2.0]}
    # they stay in the kernel: the panel's messages carry none
    assert "layers" not in h.hub.message()["ranks"][0]


def test_layers_that_do_not_check_are_passed_over() -> None:
    h = Harness()
    h.hello(0)
    rank = h.hub.jobs[-1].ranks[0]
    h.rows(0, range(1, 4), layers=_layers(3, [1.0, 2.0], ["a", "b"]))
    bad = {"step": 4, "names": ["a", "b", "c"], "packed": pack([1.0, 2.0])}  # 3 names, 2 norms
    h.rows(0, range(4, 5), layers=bad)
    assert rank.layers_at(4) is None
    worse = {"step": 5, "names": ["a"], "packed": "not base64!"}
    h.rows(0, range(5, 6), layers=worse)
    assert rank.layers_at(5) is None
    # the desync check finds none at 4 or 5, the earlier step's still
    assert rank.layers_at(3) is not None


def test_desync_names_the_first_differing_layer_from_packed_layers() -> None:
    """Packed, and named by layout: each rank's report at step 7 carries no names, the
    kernel has them from the rank's report at step 3 (rank 2's model lists its layers in
    another order: another layout, its own names)."""
    h = Harness()
    for n in range(4):
        h.hello(n)
    order, other = ["fc1.weight", "fc2.weight"], ["fc2.weight", "fc1.weight"]
    good = _layers(7, [1.0, 0.5], order, named=False)
    bad = _layers(7, [0.5, 1.3], other, named=False)
    for n in range(4):
        h.rows(n, range(1, 4), norm=2.0, layers=_layers(3, [1.0, 1.0], other if n == 2 else order))
        h.rows(n, range(4, 7), norm=2.0)
        h.rows(n, range(7, 8), norm=2.5 if n == 2 else 2.0, layers=bad if n == 2 else good)
    h.step_all(range(4), range(8, 12), norm=2.0)
    h.tick()
    (alarm,) = h.alarms()
    assert (alarm["kind"], alarm["rank"], alarm["step"], alarm["layer"]) == (
        "desync",
        2,
        7,
        "fc1.weight",
    )


def test_the_kernel_names_a_reports_layers_with_the_names_sent_for_its_layout() -> None:
    h = Harness()
    h.hello(0)
    rank = h.hub.jobs[-1].ranks[0]
    old, new = ["fc1.weight", "fc2.weight"], ["enc.0", "enc.1"]
    h.rows(0, range(1, 3), layers=_layers(2, [1.0, 2.0], old))
    h.rows(0, range(3, 5), layers=_layers(4, [3.0, 4.0], old, named=False))
    at = rank.layers_at(4)
    assert at is not None and at["names"] == old and at["norms"] == [3.0, 4.0]
    # the model changed and the report that named the new layout never arrived: its
    # norms are never read under the old names
    h.rows(0, range(5, 7), layers=_layers(6, [5.0, 6.0], new, named=False))
    assert rank.layers_at(6) is None and rank.layers_at(4) is not None
    # a report without a layout and without names names nothing either
    h.rows(0, range(7, 9), layers={"step": 8, "packed": pack([7.0, 8.0])})
    assert rank.layers_at(8) is None
    # once the new names come, that layout's later reports are named with them
    h.rows(0, range(9, 11), layers=_layers(10, [9.0, 10.0], new))
    h.rows(0, range(11, 13), layers=_layers(12, [11.0, 12.0], new, named=False))
    at = rank.layers_at(12)
    assert at is not None and at["names"] == new and at["norms"] == [11.0, 12.0]


class _Sock:
    """A DEALER socket's ``send_multipart``, full while ``full`` is set."""

    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []
        self.full = False

    def send_multipart(self, parts: list[bytes], flags: int = 0) -> None:
        if self.full:
            raise zmq.Again()
        self.sent.append(list(parts))


def test_a_real_agent_names_the_layers_only_when_the_kernel_may_lack_them() -> None:
    """The agent's own ``rows`` messages for a rank of 200 layers: the names go in the
    first report, then once in ``NAMES_EVERY``, and again at once after a hello, after a
    send that failed, and when the layout changes; the layers between are a third the size."""
    key = wire.new_key()
    worker = sim.SimWorker(0, 4, 0.01, "ipc://unused", key, layers=200)
    agent = Agent(worker)
    sess, sock, kernel = wire.session(key), _Sock(), wire.session(key)
    clock = [time.perf_counter()]

    def report() -> tuple[dict[str, object], int]:
        clock[0] += 1.0  # a second of steps
        worker.advance(clock[0])
        before = len(sock.sent)
        assert agent._send_rows(sess, sock)  # type: ignore[arg-type]
        if len(sock.sent) == before:
            return {}, 0
        parts = sock.sent[-1]
        (_, kind, content) = wire.verify(kernel, parts)
        assert kind == "rows"
        return content["layers"], len(json.dumps(content["layers"]))

    reports = [report() for _ in range(NAMES_EVERY + 2)]
    named = [i for i, (layers, _) in enumerate(reports) if "names" in layers]
    assert named == [0, NAMES_EVERY]
    layout = layout_of(sim.layer_names(200))
    assert all(layers["layout"] == layout for layers, _ in reports)
    assert reports[0][0]["names"] == sim.layer_names(200)
    assert max(size for _, size in reports[1:NAMES_EVERY]) < reports[0][1] / 3
    agent._hello(sess, sock)  # type: ignore[arg-type]  # (a kernel that may be new)
    assert "names" in report()[0] and "names" not in report()[0]
    sock.full = True  # a report without names lost: the kernel still has the names
    assert report() == ({}, 0)
    sock.full = False
    assert "names" not in report()[0]
    agent._hello(sess, sock)  # type: ignore[arg-type]
    sock.full = True  # the report with the names lost: the next names them again
    assert report() == ({}, 0)
    sock.full = False
    assert "names" in report()[0] and "names" not in report()[0]
    worker._names = sim.layer_names(3)  # another model: its names at once
    worker._layout = layout_of(worker._names)
    changed = report()[0]
    assert changed["names"] == sim.layer_names(3) and changed["layout"] == worker._layout


def test_a_reconnected_agent_names_the_layers_again() -> None:
    """The socket connecting (again: the kernel may be a new one, without the names)
    makes the agent's next report name its layers."""
    key = wire.new_key()
    agent = Agent(sim.SimWorker(0, 4, 0.01, "ipc://unused", key, layers=3))
    agent._names.sent("0000abcd", ok=True)
    assert agent._names.outgoing({"step": 1, "layout": "0000abcd", "names": ["a"]})[1] is None
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    monitor = dealer.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        assert monitor.poll(5000)
        agent._connection_events(monitor)
        assert agent._names.outgoing({"step": 2, "layout": "0000abcd", "names": ["a"]}) == (
            {"step": 2, "layout": "0000abcd", "names": ["a"]},
            "0000abcd",
        )
    finally:
        dealer.disable_monitor()
        for s in (monitor, dealer, router):
            s.close(0)
        ctx.term()
