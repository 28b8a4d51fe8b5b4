"""A rank's per-layer norms as one string (wire version 3, ranks/wire/packed.py): exact,
NaN and the infinities included; garbage refused; the kernel keeps what a report sent
and reads it only when asked (the desync alarm's layer, the panel's layers with few
ranks), so hundreds of layers in every report cost it a string, not hundreds of
numbers (issue #25)."""

from __future__ import annotations

import base64
import math

from test_ranks_job import Harness

from jupyterlab_torchdbg.ranks.kernel.rank import MAX_LAYERS_IN
from jupyterlab_torchdbg.ranks.wire.packed import pack, unpack


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


def _layers(step: int, values: list[float], names: list[str] | None = None) -> dict[str, object]:
    names = names or [f"model.{i}" for i in range(len(values))]
    return {"step": step, "names": names, "packed": pack(values)}


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
    # with few ranks the panel shows them: the largest first, NaN before any number
    h.rows(0, range(4, 5), layers=_layers(4, [1.0, math.nan, 2.0], ["a", "b", "c"]))
    shown = h.hub.message()["ranks"][0]["layers"]
    assert shown == {"step": 4, "names": ["b", "c", "a"], "norms": ["NaN", 2.0, 1.0]}


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
    # the panel shows the newest that checks, the desync check finds none at 4 or 5
    assert rank.layers is not None and rank.layers["step"] == 3


def test_desync_names_the_first_differing_layer_from_packed_layers() -> None:
    h = Harness()
    for n in range(4):
        h.hello(n)
    good = _layers(7, [1.0, 0.5], ["fc1.weight", "fc2.weight"])
    bad = _layers(7, [0.5, 1.3], ["fc2.weight", "fc1.weight"])
    for n in range(4):
        h.rows(n, range(1, 7), norm=2.0)
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
