"""The live stream in a real kernel: coalescing (R08), encoding (R10), clients (R05, R06)."""

from __future__ import annotations

import math
import textwrap

import numpy as np
from kernel_client import KernelDriver, decode_blocks, merge_series

RATE_LOOP = textwrap.dedent(
    """
    import time
    from jupyterlab_torchdbg import log
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < {seconds}:
        # pace to ~5,000 calls/s
        while n > (time.perf_counter() - t0) * 5000:
            pass
        log(loss=torch.tensor(float(n)), acc=n * 0.5)
        n += 1
    print('user print still shows', n)
    """
)


async def test_r08_5000_calls_per_second_coalesced(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    seconds = 4
    r = await loaded.run(RATE_LOOP.format(seconds=seconds))
    n = int(r.stdout.split()[-1])
    assert n > 4000 * seconds  # the loop really ran at about 5,000 steps/s
    assert "user print still shows" in r.stdout
    await loaded.drain(0.3)
    msgs = loaded.messages("series", comm_id)
    # ≤ 10 messages per second (+1 for the flush at the end of the cell)
    assert len(msgs) <= 10 * seconds + 2, len(msgs)
    assert len(msgs) >= 2 * seconds  # and it really streamed while the cell ran
    seqs = [m.data["seq"] for m in msgs]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "sequence gap"
    pts = merge_series(msgs)
    assert len(pts["loss"][1]) == n and len(pts["acc"][1]) == n
    np.testing.assert_array_equal(pts["loss"][1], np.arange(n, dtype=np.float32))
    # log() without a step counts calls from 1 (in each run)
    np.testing.assert_array_equal(pts["loss"][0], np.arange(1, n + 1, dtype=np.float64))
    # the stream arrived while the cell ran, not all at the end
    first, last = msgs[0].t, msgs[-1].t
    assert last - first > seconds / 2
    assert not any("IOPub message rate exceeded" in str(m["content"]) for m in loaded.iopub)


async def test_r10_nan_inf_none_numpy_torch_scalars(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    r = await loaded.run(
        textwrap.dedent(
            """
            import numpy as np, warnings
            from jupyterlab_torchdbg import log
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter('always')
                log(a=float('nan'), b=float('inf'), c=-float('inf'), d=np.float32(2.5),
                    e=np.int64(7), f=torch.tensor(3.0), g=torch.tensor([4.0]),
                    h=torch.tensor(1, dtype=torch.int64), i=True, j=10**400)
                log(n=None, s='text', big=torch.ones(3))
            print(len(w), sorted({str(x.message).split(':')[1].split()[0] for x in w}))
            """
        )
    )
    # None / str / multi-element tensors are ignored with one warning each
    assert r.stdout.strip() == "3 ['big', 'n', 's']"
    await loaded.drain(0.3)
    pts = merge_series(loaded.messages("series", comm_id))
    got = {k: float(v[1][-1]) for k, v in pts.items()}
    assert math.isnan(got["a"])
    assert got["b"] == math.inf and got["c"] == -math.inf
    assert got["d"] == 2.5 and got["e"] == 7 and got["f"] == 3 and got["g"] == 4
    assert got["h"] == 1 and got["i"] == 1 and got["j"] == math.inf
    assert not {"n", "s", "big"} & set(got)
    assert "DeprecationWarning" not in r.stderr


async def test_r05_two_clients_both_receive(loaded: KernelDriver) -> None:
    a = await loaded.open_comm()
    b = await loaded.open_comm()
    await loaded.run("from jupyterlab_torchdbg import log\nfor i in range(10): log(x=i)")
    await loaded.drain(0.3)
    for c in (a, b):
        pts = merge_series(loaded.messages("series", c))
        assert list(pts["x"][1]) == list(range(10))
    # the same seq numbers on both: one broadcast
    assert [m.data["seq"] for m in loaded.messages("series", a)] == [
        m.data["seq"] for m in loaded.messages("series", b)
    ]
    # closing one leaves the other streaming
    loaded.send_shell("comm_close", {"comm_id": a, "data": {}})
    await loaded.run("log(x=10)")
    await loaded.drain(0.3)
    assert merge_series(loaded.messages("series", b))["x"][1][-1] == 10


async def test_r06_late_panel_gets_one_snapshot_of_history(loaded: KernelDriver) -> None:
    await loaded.run(
        "from jupyterlab_torchdbg import log\nfor i in range(20000): log(loss=float(i))"
    )
    comm_id = await loaded.open_comm()
    snaps = loaded.messages("snapshot", comm_id)
    assert len(snaps) == 1
    hist = decode_blocks(snaps[0])["loss"]
    x, y = hist
    # downsampled but spanning the whole run, bounded in size
    assert 1000 < len(x) <= 4096
    assert x[0] == 1 and x[-1] > 19000  # calls are counted from 1
    np.testing.assert_array_equal(x.astype(np.float32) - 1, y)  # call n logged n - 1
    # no series replay: the next series continues from the snapshot's seq
    seq0 = snaps[0].data["seq"]
    await loaded.run("log(loss=1.0)")
    await loaded.drain(0.3)
    nxt = loaded.messages("series", comm_id)
    assert nxt and nxt[0].data["seq"] == seq0 + 1


async def test_explicit_step_and_history_bounded_for_a_long_run(loaded: KernelDriver) -> None:
    await loaded.run(
        textwrap.dedent(
            """
            from jupyterlab_torchdbg import log
            from jupyterlab_torchdbg.kernel.extension import current
            for step in range(0, 400_000, 2):
                current().stream.record('lr', 0.1, step)
            current().stream.flush()
            h = current().stream._series['lr'].history
            print(len(h.x), h.x[-1] >= 390_000)
            """
        ),
        timeout=300,
    )
    out = (await loaded.run("print(len(h.x) <= 4096, h.keep_every > 1)")).stdout.split()
    assert out == ["True", "True"]
