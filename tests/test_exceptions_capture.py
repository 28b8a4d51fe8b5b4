"""Capture mechanics without a kernel: bounds (R09), odd exceptions (R17, R20), no
references kept (R23), cell mapping (R40), the message schema, and the snapshot part
that replays the last exception to a late panel (R06)."""

from __future__ import annotations

import builtins
import gc
import json
import sys
import weakref
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from kernel_client import validate_kernel_message

from jupyterlab_torchdbg.kernel.comms import CommHub
from jupyterlab_torchdbg.kernel.exceptions import ExceptionMonitor
from jupyterlab_torchdbg.kernel.exceptions.capture import Limits, capture
from jupyterlab_torchdbg.kernel.exceptions.cells import CellMap
from jupyterlab_torchdbg.protocol import PROTOCOL_VERSION


def raised(fn: Any, *args: Any) -> BaseException:
    try:
        fn(*args)
    except BaseException as e:
        return e
    raise AssertionError("did not raise")


def encoded_size(msg: dict[str, Any]) -> int:
    return len(json.dumps(msg, allow_nan=False, ensure_ascii=False).encode("utf-8"))


# --- R09 bounds -----------------------------------------------------------------------------


def _down(n: int) -> int:
    return _down(n + 1)


def test_r09_3000_frame_recursion_capped_and_marked() -> None:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(3200)
    try:
        exc = raised(_down, 0)
    finally:
        sys.setrecursionlimit(old)
    msg = capture(exc)
    del exc
    assert msg["frames_total"] > 3000
    assert len(msg["frames"]) <= 40 and msg["truncated"] is True
    (gap,) = msg["elided"]
    assert gap["reason"] == "repeated" and gap["count"] > 2900
    assert msg["frames"][gap["after"]]["function"] == "_down"
    assert msg["frames"][-1]["function"] == "_down"  # the innermost frame is kept
    assert encoded_size(msg) < 200_000


def _deep(n: int, payload: Any) -> None:
    local_payload = payload  # noqa: F841 - a big local in every frame
    if n == 0:
        raise ValueError("bottom")
    _deep(n - 1, payload) if n % 2 else _deep_other(n - 1, payload)


def _deep_other(n: int, payload: Any) -> None:
    _deep(n, payload)


def test_r09_alternating_frames_limited_and_message_size_bounded() -> None:
    payload = ["s" * 100] * 5
    exc = raised(_deep, 300, payload)
    msg = capture(exc, limits=Limits(max_bytes=20_000))
    assert len(msg["frames"]) <= 40 and msg["elided"][0]["reason"] == "limit"
    assert encoded_size(msg) <= 20_000 and msg["truncated"] is True


def test_r09_five_megabyte_message_cut() -> None:
    msg = capture(ValueError("x" * 5_000_000))
    assert msg["exception"]["message_truncated"] is True and msg["truncated"] is True
    assert len(msg["exception"]["message"]) == 10_000
    assert encoded_size(msg) < 100_000


# --- R17 / R20 odd exceptions ----------------------------------------------------------------


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")

    def __repr__(self) -> str:
        raise RuntimeError("no")


def test_r17_exception_whose_str_raises() -> None:
    msg = capture(raised(lambda: (_ for _ in ()).throw(BrokenStr())))
    assert msg["exception"]["message"] == "n/a"
    assert msg["exception"]["message_unavailable"] is True
    assert msg["diagnosis"]["category"] == "generic"


def test_r20_syntax_error_rendered() -> None:
    exc = raised(compile, "x = (1 +\n", "snippet.py", "exec")
    msg = capture(exc)
    syn = msg["exception"]["syntax"]
    assert msg["exception"]["type"] == "SyntaxError"
    assert syn["lineno"] == 1 and syn["text"] == "x = (1 +"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is Python 3.11+")
def test_r20_exception_group_nested_and_bounded() -> None:
    eg: Any = getattr(builtins, "ExceptionGroup", None)
    inner = eg("inner", [KeyError("k"), TypeError("t")])
    many = [ValueError(str(i)) for i in range(50)]
    msg = capture(eg("outer", [inner, *many]))
    group = msg["group"]
    assert [g["path"] for g in group[:3]] == [[0, 0], [0, 1], [1]]
    assert len(group) == 20  # bounded


def test_r20_cause_context_cycle_terminates() -> None:
    a, b = ValueError("a"), KeyError("b")
    a.__cause__ = b
    b.__context__ = a
    msg = capture(a)
    assert [(c["relation"], c["type"]) for c in msg["chain"]] == [("cause", "KeyError")]


def test_r20_lone_surrogates_encodable() -> None:
    msg = capture(ValueError("bad \udcff \ud800 end"))
    assert msg["exception"]["message"] == "bad \\udcff \\ud800 end"
    json.dumps(msg, ensure_ascii=False).encode("utf-8")


# --- R23 no references -------------------------------------------------------------------------


def _holds_big(box: list[Any]) -> None:
    big = torch.zeros(1_000_000)
    box.append(weakref.ref(big))
    raise RuntimeError("boom")


def test_r23_capture_keeps_no_frames_or_tensors() -> None:
    box: list[Any] = []
    exc = raised(_holds_big, box)
    msg = capture(exc)
    assert box[0]() is not None  # alive through the exception's traceback only
    del exc
    gc.collect()
    assert box[0]() is None
    # the message holds JSON values only (strings, numbers, lists, dicts)
    assert json.loads(json.dumps(msg)) == msg


# --- R40 cell mapping ---------------------------------------------------------------------------


@dataclass
class FakeCompiler:
    _filename_map: dict[str, int]

    def get_code_name(self, raw: str, transformed: str, number: int) -> str:
        return f"/tmp/ipykernel_0/{abs(hash(raw))}.py"


def _run(cells: CellMap, compiler: FakeCompiler, code: str, count: int, cell_id: str) -> str:
    cells.pre_run_cell(SimpleNamespace(cell_id=cell_id, raw_cell=code))
    name = compiler.get_code_name(code, code, count)
    compiler._filename_map[name] = count
    info = SimpleNamespace(cell_id=cell_id, raw_cell=code, transformed_cell=code)
    cells.post_run_cell(SimpleNamespace(info=info, execution_count=count))
    return name


def test_r40_identical_code_maps_to_latest_cell_and_edits_are_seen() -> None:
    compiler = FakeCompiler({})
    cells = CellMap(SimpleNamespace(compile=compiler))
    f1 = _run(cells, compiler, "def f(): 1/0", 1, "A")
    assert _run(cells, compiler, "def f(): 1/0", 2, "B") == f1  # same file name
    run = cells.lookup(f1)
    assert run is not None and (run.cell_id, run.execution_count) == ("B", 2)
    assert not cells.source_changed(run)
    _run(cells, compiler, "def g(): pass", 3, "B")  # B edited and re-run
    assert cells.source_changed(run)
    # a cell that ran before the extension loaded: known by count, no id
    compiler._filename_map["/tmp/ipykernel_0/old.py"] = 0
    old = cells.lookup("/tmp/ipykernel_0/old.py")
    assert old is not None and (old.cell_id, old.execution_count) == (None, 0)
    assert cells.lookup("/usr/lib/python3/x.py") is None


# --- the message and the snapshot part (R06) ---------------------------------------------------


class FakeComm:
    def __init__(self, comm_id: str) -> None:
        self.comm_id = comm_id
        self.sent: list[dict[str, Any]] = []

    def send(self, data: dict[str, Any], buffers: Any = None) -> None:
        self.sent.append(data)

    def on_msg(self, cb: Any) -> None:
        pass

    def on_close(self, cb: Any) -> None:
        pass


class FakeExt:
    def __init__(self) -> None:
        self.shell = SimpleNamespace(events=None, compile=FakeCompiler({}), user_ns_hidden={})
        self.session_id = "0123456789abcdef"
        self.errors: dict[str, int] = {}
        self.hub = CommHub(
            SimpleNamespace(),
            hello=lambda: {
                "capabilities": self.capabilities(),
                "session_id": self.session_id,
                "actions": [],
            },
            handle_action=lambda data: {},
            snapshot=lambda deliver: deliver(
                {"method": "snapshot", "seq": 0, "blocks": [], "stats": self.stats()}, []
            ),
            on_error=self.count_error,
        )

    def count_error(self, site: str) -> None:
        self.errors[site] = self.errors.get(site, 0) + 1

    def stats(self) -> dict[str, Any]:
        return {"messages": 0, "points": 0, "errors": dict(self.errors)}

    def capabilities(self) -> dict[str, Any]:
        avail = {"available": False, "version": None, "reason": "test"}
        return {
            "torch": avail,
            "cuda": {"available": False, "initialized": False},
            "nvml": avail,
            "subshells": False,
        }


def _open(hub: CommHub, comm_id: str) -> FakeComm:
    comm = FakeComm(comm_id)
    hub._on_open(
        comm, {"content": {"data": {"method": "open", "protocol_version": PROTOCOL_VERSION}}}
    )
    return comm


def test_r06_snapshot_part_replays_last_exception_once_and_schema_valid() -> None:
    ext = FakeExt()
    monitor = ExceptionMonitor(ext)  # type: ignore[arg-type]
    remove = ext.hub.add_snapshot_part(monitor.snapshot_messages)
    live = _open(ext.hub, "live")
    assert [m["method"] for m in live.sent] == ["hello", "snapshot"]  # nothing to replay yet

    def boom() -> None:
        x = torch.zeros(2, 3)  # noqa: F841
        raise ValueError(float("nan"))

    result = SimpleNamespace(
        error_in_exec=raised(boom),
        error_before_exec=None,
        execution_count=7,
        info=SimpleNamespace(cell_id="c1", raw_cell="boom()", transformed_cell="boom()"),
    )
    monitor.post_run_cell(result)
    sent = live.sent[-1]
    assert sent["method"] == "exception" and sent["replay"] is False
    assert sent["execution_count"] == 7 and sent["capture_ms"] >= 0
    validate_kernel_message(sent)

    late = _open(ext.hub, "late")
    assert [m["method"] for m in late.sent] == ["hello", "snapshot", "exception"]
    replay = late.sent[-1]
    assert replay["replay"] is True and replay["id"] == sent["id"]
    validate_kernel_message(replay)
    assert ext.errors == {}

    remove()
    assert [m["method"] for m in _open(ext.hub, "after").sent] == ["hello", "snapshot"]


def test_r11_failing_snapshot_part_is_counted_not_raised() -> None:
    ext = FakeExt()

    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("part failed")

    ext.hub.add_snapshot_part(broken)
    comm = _open(ext.hub, "c")
    assert [m["method"] for m in comm.sent] == ["hello", "snapshot"]
    assert ext.errors == {"snapshot_part": 1}


@pytest.mark.parametrize("quiet", [KeyboardInterrupt(), SystemExit(1)])
def test_r19_quiet_exceptions_not_captured(quiet: BaseException) -> None:
    ext = FakeExt()
    monitor = ExceptionMonitor(ext)  # type: ignore[arg-type]
    monitor.post_run_cell(
        SimpleNamespace(error_in_exec=quiet, error_before_exec=None, execution_count=1, info=None)
    )
    assert monitor.last is None
