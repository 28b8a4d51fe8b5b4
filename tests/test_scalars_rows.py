"""``log()`` of many plain numbers: recorded as one row per call (``log_rows``).

In-process against the testing fakes; every message validated against the schema and
decoded as the panel decodes it. The row path must record exactly what the one-by-one
path records (values, steps, counting without a step), keep loss names as scalar series
(the divergence alarm reads them) and hand anything but plain numbers to the general
path with its conversions and warnings.
"""

from __future__ import annotations

import math
import textwrap
import warnings

import numpy as np
import torch
from grads_support import FakeComm
from kernel_client import KernelDriver, merge_series

from jupyterlab_torchdbg import log, testing
from jupyterlab_torchdbg.kernel import log_rows


def _names(n: int, prefix: str = "m") -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(n)]


def test_wide_call_is_one_row_of_one_block_with_every_value() -> None:
    names = _names(40)
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        for step in range(30):
            log(step * 10, **{n: step + i / 8 for i, n in enumerate(names)})
        loaded.ext.stream.flush()
        comm = loaded.comm
        assert isinstance(comm, FakeComm)
        got = comm.series()
        blocks = [b for d in comm.messages("series") for b in d["blocks"] if "names" in b]
    # one block carries all 40 names (announced once), not 40 scalar blocks
    assert [b["names"] for b in blocks] == [names]
    for i, n in enumerate(names):
        xs, ys = got[n]
        assert list(xs) == [step * 10 for step in range(30)]
        assert np.allclose(ys, [step + i / 8 for step in range(30)])


def test_without_a_step_each_call_counts_from_one_like_scalar_series() -> None:
    names = _names(20)
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        for k in range(5):
            log(**dict.fromkeys(names, float(k)))
        log(alone=1.0)
        log(alone=2.0)
        loaded.ext.stream.flush()
        assert isinstance(loaded.comm, FakeComm)
        got = loaded.comm.series()
    assert list(got["m00"][0]) == [1, 2, 3, 4, 5]
    assert list(got["alone"][0]) == [1, 2]


def test_loss_names_stay_scalar_series_beside_the_row() -> None:
    names = _names(20)
    values = {**dict.fromkeys(names, 1.5), "train/loss": 0.25, "val_loss": 0.5}
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        for step in range(3):
            log(step, **values)
        stream = loaded.ext.stream
        stream.flush()
        # the divergence alarm's reader sees the loss
        assert stream.last("train/loss") == 0.25
        assert stream.last("val_loss") == 0.5
        assert isinstance(loaded.comm, FakeComm)
        got = loaded.comm.series()
        named = [b["names"] for d in loaded.comm.messages("series") for b in d["blocks"]]
    assert names in named and ["train/loss"] in named and ["val_loss"] in named
    assert list(got["train/loss"][0]) == [0, 1, 2]
    assert list(got["m19"][1]) == [1.5, 1.5, 1.5]


def test_anything_but_plain_numbers_takes_the_general_path() -> None:
    names = _names(20)
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log(1, **dict.fromkeys(names, 1.0), t=torch.tensor(2.0), s="text")
            log(2, **dict.fromkeys(names, 1.0), huge=10**400, b=True)
        loaded.ext.stream.flush()
        assert isinstance(loaded.comm, FakeComm)
        got = loaded.comm.series()
    assert got["t"][1].tolist() == [2.0]
    assert "s" not in got and len(caught) == 1 and "text" not in str(caught[0].message)
    assert math.isinf(got["huge"][1][0]) and got["b"][1].tolist() == [1.0]
    assert got["m00"][1].tolist() == [1.0, 1.0]


def test_non_finite_values_and_narrow_calls() -> None:
    names = _names(log_rows.ROW_MIN_NAMES)
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        log(0, **{n: (math.nan if i == 0 else math.inf) for i, n in enumerate(names)})
        log(0, **dict.fromkeys(_names(3, "few"), 1.0))  # under ROW_MIN_NAMES: one by one
        loaded.ext.stream.flush()
        assert isinstance(loaded.comm, FakeComm)
        got = loaded.comm.series()
        blocks = [b["names"] for d in loaded.comm.messages("series") for b in d["blocks"]]
    assert math.isnan(got[names[0]][1][0]) and math.isinf(got[names[1]][1][0])
    assert names in blocks and ["few00"] in blocks


async def test_wide_log_in_a_real_kernel_delivers_every_point_while_a_run_is_on(
    loaded: KernelDriver,
) -> None:
    comm_id = await loaded.open_comm()
    r = await loaded.run(
        textwrap.dedent(
            """
            import time
            from jupyterlab_torchdbg import log
            names = [f"bench/s{i:03d}" for i in range(400)]
            t0 = time.perf_counter()
            for step in range(1000):
                while time.perf_counter() - t0 < step / 500:
                    pass
                log(step, **{n: step + i / 1000 for i, n in enumerate(names)})
            print('done')
            """
        )
    )
    assert "done" in r.stdout, r
    await loaded.drain(0.3)
    msgs = loaded.messages("series", comm_id)
    assert len(msgs) >= 5  # streamed while the cell ran
    pts = merge_series(msgs)
    for i in (0, 199, 399):
        xs, ys = pts[f"bench/s{i:03d}"]
        np.testing.assert_array_equal(xs, np.arange(1000, dtype=np.float64))
        np.testing.assert_allclose(ys, np.arange(1000) + i / 1000, rtol=1e-6)


def test_values_as_one_dict_record_what_the_keywords_record() -> None:
    wide = {n: float(i) for i, n in enumerate(_names(30))}
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        for step in range(4):
            log(step, wide)  # the wide form: the caller's dict, no keyword rebuild
        log({"lr": 0.5})  # without a step, a few values (the general path)
        log({"lr": 0.25}, extra=3.0)  # keywords beside the dict
        log(9, {"acc": 0.5}, acc=0.75)  # a keyword wins over the dict's value
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log({1: 2.0, "ok": 1.0})  # a key that is not a str: logged as str(key)
            log(5, {**wide, 7: 1.0})  # ... in a wide call too (the general path)
        stream = loaded.ext.stream
        stream.flush()
        assert isinstance(loaded.comm, FakeComm)
        got = loaded.comm.series()
        assert loaded.ext.errors.get("log", 0) == 0
    assert wide == {n: float(i) for i, n in enumerate(_names(30))}  # not changed
    assert sorted(got["m29"][0]) == [0, 1, 2, 3, 5] and list(got["m29"][1]) == [29.0] * 5
    assert list(got["lr"][1]) == [0.5, 0.25] and list(got["extra"][1]) == [3.0]
    assert list(got["acc"][0]) == [9] and list(got["acc"][1]) == [0.75]
    assert list(got["1"][1]) == [2.0] and list(got["ok"][1]) == [1.0]
    assert list(got["7"][0]) == [5]
    assert any("is not a str" in str(w.message) for w in caught)
