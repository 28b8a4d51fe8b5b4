"""``log()`` against hostile values and names (R42); bounded names and warnings (R44).

In-process against ``jupyterlab_torchdbg.testing``'s fakes (every message validated
against the schema as it is sent), plus one real kernel that keeps training through a
hostile cell with a bounded stderr and schema-valid messages.
"""

from __future__ import annotations

import json
import math
import textwrap
import warnings
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn
from grads_support import FakeComm, session
from kernel_client import KernelDriver, decode_blocks, merge_series

from jupyterlab_torchdbg import log, testing
from jupyterlab_torchdbg.kernel import scalars
from jupyterlab_torchdbg.kernel.stream import Stream, bound_name, limits
from jupyterlab_torchdbg.kernel.stream.host_copy import resolve_values


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with log()'s per-process warning budget unspent."""
    monkeypatch.setattr(scalars, "_warned", set())
    monkeypatch.setattr(scalars, "_suppressed", False)
    yield


class Raises:
    """A value whose every conversion raises."""

    def __float__(self) -> float:
        raise RuntimeError("no float")

    def __index__(self) -> int:
        raise RuntimeError("no index")

    def __bool__(self) -> bool:
        raise RuntimeError("no bool")


class RaisesOnAttribute:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name}")


class IndexOnly:
    def __index__(self) -> int:
        return 9


def _float8_dtypes() -> list[torch.dtype]:
    return [getattr(torch, n) for n in dir(torch) if n.startswith("float8_")]


def _quantized() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantize_per_tensor's deprecation
        return torch.quantize_per_tensor(torch.tensor([1.5]), 0.5, 0, torch.qint8)


#: name -> (value, what the panel receives).
RECORDED: dict[str, tuple[object, float]] = {
    "huge": (10**400, math.inf),
    "huge_neg": (-(10**400), -math.inf),
    "decimal": (Decimal("2.5"), 2.5),
    "decimal_snan": (Decimal("sNaN"), math.nan),
    "decimal_huge": (Decimal("1e999999"), math.inf),
    "fraction": (Fraction(1, 4), 0.25),
    "fraction_huge": (Fraction(10**400, 3), math.inf),
    "bool": (True, 1.0),
    "np_0d": (np.array(3.0), 3.0),
    "np_1elem": (np.array([4.0]), 4.0),
    "np_bool": (np.bool_(True), 1.0),
    "np_f16": (np.float16(0.5), 0.5),
    "np_u64": (np.uint64(2**63), float(2**63)),
    "np_longdouble": (np.longdouble(6.0), 6.0),
    "nan": (math.nan, math.nan),
    "inf": (math.inf, math.inf),
    "index_only": (IndexOnly(), 9.0),
    "t_bool": (torch.tensor(True), 1.0),
    "t_int": (torch.tensor([7], dtype=torch.int64), 7.0),
    "t_u8": (torch.tensor(200, dtype=torch.uint8), 200.0),
    "t_f16": (torch.tensor(1.5, dtype=torch.float16), 1.5),
    "t_bf16": (torch.tensor(2.0, dtype=torch.bfloat16), 2.0),
    "t_grad": (torch.tensor(5.0, requires_grad=True), 5.0),
    "t_sparse": (torch.tensor([3.0]).to_sparse(), 3.0),
    "t_quant": (_quantized(), 1.5),
    **{f"t_{d}".replace("torch.", ""): (torch.tensor(2.0).to(d), 2.0) for d in _float8_dtypes()},
}
#: name -> value that is skipped with a warning.
SKIPPED: dict[str, object] = {
    "none": None,
    "text": "1.0",
    "bytes": b"1",
    "complex": 1 + 2j,
    "np_complex": np.complex64(1),
    "t_complex": torch.tensor(1 + 1j),
    "t_two": torch.ones(2),
    "t_empty": torch.ones(0),
    "np_two": np.ones(2),
    "np_datetime": np.datetime64("2020-01-01"),
    "t_meta": torch.ones(1, device="meta"),
    "raises": Raises(),
    "raises_on_attribute": RaisesOnAttribute(),
    "object": object(),
}


def _last_values(comm: FakeComm) -> dict[str, float]:
    return {k: float(v[1][-1]) for k, v in comm.series().items()}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_r42_log_never_raises_for_hostile_values_steps_and_names() -> None:
    log(10**400, loss=1.0, **SKIPPED)  # not loaded: a no-op
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log(10**400, loss=1.0)  # OverflowError before the fix
            log(10**400, **{k: v for k, (v, _) in RECORDED.items()}, **SKIPPED)
            log(float("nan"), nan_step=1.0)
            log(torch.tensor(3), tensor_step=1.0)
            log(Raises(), raising_step=1.0)
            log(**{"": 1.0, "\ud800lone": 2.0, " ": 3.0})
        loaded.ext.stream.flush()
        assert "log" not in loaded.ext.errors
        got = _last_values(loaded.comm)  # every message validated against the schema
        for name, (_, want) in RECORDED.items():
            assert _same(got[name], want), (name, got.get(name), want)
        assert not set(SKIPPED) & set(got)
        assert got["loss"] == 1.0 and got[""] == 1.0 and got["\ufffdlone"] == 2.0
        x = {k: v[0].tolist() for k, v in loaded.comm.series().items()}
        assert x["loss"] == [1.0]  # an unusable step is ignored: the series counts calls
        assert x["tensor_step"] == [3.0]  # a CPU tensor is a usable step
        messages = [str(w.message) for w in caught]
        assert sum("step must be" in m for m in messages) == 1
        assert all(m.startswith("jupyterlab_torchdbg.log: ") for m in messages)
        for name in SKIPPED:
            assert sum(m.split()[1] == name for m in messages) == 1, name


def test_r42_warnings_turned_into_errors_never_raise_nor_lose_other_values() -> None:
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            log(10**400, a=None, b=1.0, c="x", d=torch.ones(3), e=2.0)
        loaded.ext.stream.flush()
        assert _last_values(loaded.comm) == {"b": 1.0, "e": 2.0}
        assert "log" not in loaded.ext.errors


def test_r42_one_odd_dtype_never_costs_the_other_device_values_theirs() -> None:
    # On a device, values are stacked at flush; float8 does not promote with float32.
    odd = [torch.tensor(2.0).to(d) for d in _float8_dtypes()]
    values: list[Any] = [torch.tensor(1.0), *odd, torch.tensor(True), 0.5]
    assert resolve_values(values) == [1.0, *[2.0] * len(odd), 1.0, 0.5]


def test_r44_warnings_are_bounded_in_count_and_memory() -> None:
    names = {f"n{i}": None for i in range(20_000)}
    with testing.loaded_extension(comm=FakeComm()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log(**names)
            log(**{f"s{i}": "text" for i in range(1000)})
            log(**{f"t{i}": torch.ones(2) for i in range(1000)})
    assert len(caught) == scalars.MAX_WARNINGS + 1
    assert "further warnings suppressed" in str(caught[-1].message)
    assert len(scalars._warned) <= scalars.MAX_WARNINGS
    assert sum(len(str(w.message)) for w in caught) < 300 * len(caught)


def test_r44_warning_text_is_bounded_and_encodable() -> None:
    odd_type = type("T" * 10_000, (), {})
    with testing.loaded_extension(comm=FakeComm()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log(**{"\ud800" + "n" * 100_000: None, "plain": odd_type()})
    assert len(caught) == 2
    for w in caught:
        text = str(w.message)
        assert len(text) < 400
        text.encode("utf-8")  # stderr can carry it (no lone surrogate)


def test_r44_long_names_are_cut_to_512_with_a_distinct_marker() -> None:
    a, b = "a" * 600, "a" * 599 + "b"
    ca, cb = bound_name(a), bound_name(b)
    assert len(ca) == len(cb) == limits.MAX_NAME_LENGTH == 512
    assert ca[:500] == a[:500] and ca[500:502] == "…#" and len(ca[502:]) == 10
    assert ca != cb and bound_name(a) == ca  # distinct, and stable
    assert bound_name(ca) == ca  # idempotent: a cut name the panel sends back matches
    assert bound_name("x" * 512) == "x" * 512 and bound_name("loss") == "loss"
    assert bound_name("\ud800x") == "\ufffdx"
    assert bound_name("\ud800" * 600) != bound_name("\udfff" * 600)


def test_r44_every_name_the_stream_keeps_or_sends_is_bounded() -> None:
    long_layer = "grad/opt/" + "L" * 2000
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        stream = loaded.ext.stream
        log(**{"x" * 5000: 1.0, "x" * 4999 + "y": 2.0})
        blk = stream.block([long_layer + "0", long_layer + "1", "grad/opt/\udc00"])
        assert stream.block([long_layer + "0", long_layer + "1", "grad/opt/\udc00"]) is blk
        blk.record(torch.tensor([1.0, 2.0, 3.0]), 0)
        stream.flush()  # FakeComm validates: names over 512 fail the schema
        names = stream.names()
        assert len(names) == 5 and len(set(names)) == 5
        assert all(len(n) <= 512 for n in names)
        for n in names:
            n.encode("utf-8")
        got = _last_values(loaded.comm)
        assert got[bound_name("x" * 5000)] == 1.0 and got[bound_name(long_layer + "1")] == 2.0
        # the panel clears a series by the (cut) name it was sent
        ack = loaded.comm.action("clear_history", {"names": [bound_name("x" * 5000)]})
        assert ack["method"] == "ack" and ack["result"]["cleared"] == 1
        assert bound_name("x" * 4999 + "y") in stream.names()


def test_r44_gradient_monitor_names_go_through_the_same_bound() -> None:
    model = nn.Sequential()
    model.add_module("m" * 700, nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with session({"model": model, "opt": opt}) as s:
        s.comm.action("set_stride", {"stride": 1})
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
        s.end_cell()
        names = s.ext.stream.names()
        assert any("m" * 400 in n for n in names)
        assert all(len(n) <= 512 for n in names)
        assert s.comm.series()  # sent, and valid against the schema


def test_r44_snapshot_at_the_maximum_series_and_name_length_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "HISTORY_CAPACITY", 4)
    s = Stream(lambda h, b: None, interval_s=1e9)
    wide = "\U0001f600" * 5000  # 4 bytes a character in UTF-8
    for i in range(limits.MAX_SERIES + 100):
        s.record(f"{i}{wide}", 1.0, 0)
    width = 512
    for i in range(2 * limits.MAX_BLOCK_NAMES // width):  # twice what blocks may hold
        s.block([f"{i}/{j}{wide}" for j in range(width)]).record([0.0] * width, 0)
        s.flush()
    blocks, buffers, _ = s.snapshot()
    names = sum(len(b["names"]) for b in blocks)
    assert names == limits.MAX_SERIES + limits.MAX_BLOCK_NAMES
    assert s.ignored_series == 100 + limits.MAX_BLOCK_NAMES
    header = len(json.dumps(blocks, ensure_ascii=False).encode("utf-8"))
    assert header <= names * (4 * limits.MAX_NAME_LENGTH + 8) + len(blocks) * 64
    assert header < 25_000_000  # about 21 MB at worst, whatever the user names
    assert sum(len(b) for b in buffers) <= len(blocks) * 4 * 8 + names * 4 * 4


def test_r44_blocks_recorded_into_lately_are_kept_when_room_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "MAX_BLOCK_NAMES", 4)
    s = Stream(lambda h, b: None, interval_s=1e9)
    live, idle = s.block(["live/a", "live/b"]), s.block(["idle/a"])
    live.record([1.0, 2.0], 0)
    s.flush()
    s.block(["new/a", "new/b"])  # needs room: the idle block goes, not the live one
    assert sorted(s.names()) == ["live/a", "live/b", "new/a", "new/b"]
    assert s.ignored_series == 1 and idle is not None


LOOP = textwrap.dedent(
    """
    import sys, numpy as np, torch
    from decimal import Decimal
    from jupyterlab_torchdbg import log

    class Raises:
        def __float__(self): raise RuntimeError('no')
        def __index__(self): raise RuntimeError('no')
        def __bool__(self): raise RuntimeError('no')

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    log(10**400, loss=1.0)
    steps = 0
    for step in range(200):
        opt.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        log(10**400 + step, loss=loss, big=10**400, dec=Decimal('1.5'), c=1j,
            b=torch.tensor(True), f8=torch.tensor(2.0).to(torch.float8_e4m3fn),
            z=torch.ones(2), m=torch.ones(1, device='meta'), n=None, r=Raises(),
            **{'': 1.0, '\\ud800': 2.0, 'L' * 3000: 3.0})
        log(**{f'none{step}_{i}': None for i in range(100)})
        steps += 1
    print('steps', steps)
    """
)


async def test_r42_r44_hostile_log_calls_leave_a_real_kernel_training(
    loaded: KernelDriver,
) -> None:
    comm_id = await loaded.open_comm()
    r = await loaded.run(LOOP)  # validates every comm message against the schema
    assert r.stdout.split() == ["steps", "200"]
    assert r.stderr.count("jupyterlab_torchdbg.log:") <= scalars.MAX_WARNINGS + 1
    assert "further warnings suppressed" in r.stderr
    assert len(r.stderr) < 20_000
    errors = await loaded.value(
        "__import__('jupyterlab_torchdbg.kernel.extension').kernel.extension.current().errors"
    )
    assert "log" not in errors
    await loaded.drain(0.3)
    pts = merge_series(loaded.messages("series", comm_id))
    assert len(pts["loss"][1]) == 201 and pts["big"][1][-1] == math.inf
    assert pts["f8"][1][-1] == 2.0 and pts["b"][1][-1] == 1.0 and pts["dec"][1][-1] == 1.5
    assert pts["\ufffd"][1][-1] == 2.0 and pts[""][1][-1] == 1.0
    assert pts[bound_name("L" * 3000)][1][-1] == 3.0
    assert not {"c", "z", "m", "n", "r"} & set(pts)
    later = await loaded.open_comm()  # a snapshot with every name, valid too
    snap = decode_blocks(loaded.messages("snapshot", later)[0])
    assert all(len(n) <= 512 for n in snap)


def test_r42_extra_positional_values_are_ignored_with_one_warning() -> None:
    import jupyterlab_torchdbg

    jupyterlab_torchdbg.log(1, 2, 3, loss=1.0)  # not loaded: a no-op, no TypeError
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jupyterlab_torchdbg.log(7, 2, 3, loss=1.0)
            jupyterlab_torchdbg.log(8, 2, loss=2.0)
        loaded.ext.stream.flush()
        assert loaded.comm.series()["loss"][0].tolist() == [7.0, 8.0]  # the step still counts
        messages = [str(w.message) for w in caught]
        assert sum("a dict of values positionally" in m for m in messages) == 1
