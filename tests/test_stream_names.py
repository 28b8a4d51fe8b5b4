"""The stream's name table (PROTOCOL.md, "The name table"), R05 and R06.

Names go out once per block id: in the first ``series`` message that carries the block,
and in every snapshot. Every comm (a late panel, a second client, one that resynced) can
decode every block it receives. In-process, against ``jupyterlab_torchdbg.testing``'s fake
comm, which keeps the panel's table and counts any block it could not have decoded.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pytest
import torch
from grads_support import FakeComm

from jupyterlab_torchdbg import testing
from jupyterlab_torchdbg.kernel.stream import Stream, limits

LAYERS = [f"grad/opt/model.layers.{i}.weight" for i in range(400)]


def recording_stream() -> tuple[Stream, list[tuple[dict[str, Any], list[bytes]]]]:
    sent: list[tuple[dict[str, Any], list[bytes]]] = []
    s = Stream(lambda h, b: sent.append((h, [bytes(x) for x in b])), interval_s=1e9)
    return s, sent


def test_names_are_sent_once_per_block() -> None:
    s, sent = recording_stream()
    blk = s.block(LAYERS)
    for step in range(3):
        for i in range(10):
            blk.record(torch.full((400,), float(step * 10 + i)), step * 10 + i)
        s.record("loss", float(step))
        s.flush()
    first, second, third = (h for h, _ in sent)
    assert first["blocks"] == [
        {"id": 2, "count": 1, "names": ["loss"]},
        {"id": 1, "count": 10, "names": LAYERS},
    ]
    ids_only = [{"id": 2, "count": 1}, {"id": 1, "count": 10}]
    assert second["blocks"] == third["blocks"] == ids_only
    # the header of a 400-series message is a few dozen bytes, not 400 names
    assert len(json.dumps(second)) < 120 < 10_000 < len(json.dumps(first))


def test_snapshot_carries_every_id_with_its_names_and_row_major_history() -> None:
    s, _ = recording_stream()
    s.record("loss", 1.0, 0)
    s.record("loss", 2.0, 1)
    blk = s.block(["a", "b"])
    blk.record(torch.tensor([1.0, 10.0]), 0)
    blk.record(torch.tensor([2.0, 20.0]), 1)
    s.flush()
    s.block(["not", "yet", "recorded"])  # a panel must know it before its first row
    blocks, buffers, seq = s.snapshot()
    assert seq == 1
    assert blocks == [
        {"id": 1, "names": ["loss"], "count": 2},
        {"id": 2, "names": ["a", "b"], "count": 2},
        {"id": 3, "names": ["not", "yet", "recorded"], "count": 0},
    ]
    y = np.frombuffer(bytes(buffers[3]), "<f4")
    assert y.tolist() == [1, 10, 2, 20]  # row-major: a0 b0 a1 b1


def test_changed_names_get_a_new_id_announced_with_them() -> None:
    s, sent = recording_stream()
    s.block(["l0", "l1"]).record([1.0, 2.0], 0)
    s.flush()
    # the model's layers changed: a new block, never the old id with other names
    s.block(["l0", "l1", "l2"]).record([1.0, 2.0, 3.0], 1)
    s.flush()
    assert sent[1][0]["blocks"] == [{"id": 2, "count": 1, "names": ["l0", "l1", "l2"]}]
    # a cleared series logged again is a new block too
    s.record("loss", 1.0)
    s.flush()
    assert s.clear(["loss"]) == 1
    s.record("loss", 2.0)
    s.flush()
    loss_blocks = [b for h, _ in sent[2:] for b in h["blocks"]]
    assert loss_blocks == [
        {"id": 3, "count": 1, "names": ["loss"]},
        {"id": 4, "count": 1, "names": ["loss"]},
    ]


def test_r05_r06_second_and_late_clients_decode_every_block() -> None:
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        first = loaded.comm
        stream = loaded.ext.stream
        blk = stream.block(LAYERS)
        for i in range(20):
            blk.record(torch.full((400,), float(i)), i)
        stream.record("loss", 0.5, 0)
        stream.flush()
        # a second client opens late: its snapshot names every block
        second = loaded.manager.open(FakeComm())
        snap = second.messages("snapshot")[0]
        assert {b["id"]: b["names"] for b in snap["blocks"]} == {
            blk.id: LAYERS,
            stream._series["loss"].id: ["loss"],
        }
        for i in range(20, 30):
            blk.record(torch.full((400,), float(i)), i)
        stream.record("loss", 0.25, 1)
        stream.flush()
        later = [b for b in second.messages("series")[-1]["blocks"]]
        assert all("names" not in b for b in later)  # ids only: known from the snapshot
        for comm in (first, second):
            assert comm.unknown_blocks == 0 and comm.gaps == 0
        got = first.series()
        assert got[LAYERS[7]][1].tolist() == [float(i) for i in range(30)]
        assert second.series()[LAYERS[7]][1].tolist() == [float(i) for i in range(20, 30)]
        assert second.series()["loss"][1].tolist() == [0.25]


def test_r06_resync_snapshot_goes_to_the_requester_only_with_the_table() -> None:
    with testing.loaded_extension(comm=FakeComm()) as loaded:
        other = loaded.manager.open(FakeComm())
        loaded.ext.stream.record("loss", 1.0)
        loaded.ext.stream.flush()
        before = len(other.messages("snapshot"))
        ack = loaded.comm.action("snapshot")
        assert ack["method"] == "ack"
        snap = loaded.comm.messages("snapshot")[-1]
        assert [b["names"] for b in snap["blocks"]] == [["loss"]]
        assert len(other.messages("snapshot")) == before


def test_r05_comms_joining_while_training_flushes_never_miss_names_or_seq() -> None:
    """The snapshot and joining the broadcast happen in one step against flushes."""
    with testing.loaded_extension() as loaded:
        stream = loaded.ext.stream
        stop = threading.Event()
        comms: list[testing.FakeComm] = []

        def open_comms() -> None:
            while not stop.is_set() and len(comms) < 60:
                comms.append(loaded.manager.open(testing.FakeComm()))

        opener = threading.Thread(target=open_comms)
        opener.start()
        try:
            step = 0
            while opener.is_alive() and step < 20_000:
                # new names now and then (a new block, announced once)
                stream.block([f"b{step // 500}/x", f"b{step // 500}/y"]).record([1.0, 2.0], step)
                stream.record("loss", float(step), step)
                if step % 25 == 0:
                    stream.flush()
                step += 1
        finally:
            stop.set()
            opener.join()
        stream.flush()
        assert len(comms) > 5
        for c in [loaded.comm, *comms]:
            assert c.unknown_blocks == 0, c.unknown_blocks
            assert c.gaps == 0


def test_history_decimates_in_chunks_and_snapshot_bytes_stay_valid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "HISTORY_CAPACITY", 64)
    s, _ = recording_stream()
    blk = s.block(["u", "v"])
    for i in range(50):
        blk.record([float(i), -float(i)], i)
    s.flush()
    _, buffers, _ = s.snapshot()
    kept = bytes(buffers[1])
    # one flush of more rows than the history holds: decimated while it is added
    for i in range(50, 1000):
        blk.record([float(i), -float(i)], i)
    s.flush()
    assert bytes(buffers[1]) == kept  # a snapshot waiting to be sent is never rewritten
    blocks, buffers, _ = s.snapshot()
    n = blocks[0]["count"]
    x = np.frombuffer(bytes(buffers[0]), "<f8")
    y = np.frombuffer(bytes(buffers[1]), "<f4").reshape(n, 2)
    assert n < 64 and x[0] == 0 and x[-1] > 900
    assert np.all(np.diff(x) == blk.history.keep_every)  # evenly thinned over the whole run
    assert y[:, 0].tolist() == x.tolist() and y[:, 1].tolist() == (-x).tolist()


def test_rows_that_require_grad_are_kept_without_their_graph() -> None:
    s, sent = recording_stream()
    blk = s.block(["a", "b", "c"])
    w = torch.ones(3, requires_grad=True)
    blk.record(w * 2, 0)  # a row recorded without detaching
    s.flush()
    assert np.frombuffer(sent[0][1][1], "<f4").tolist() == [2.0, 2.0, 2.0]
    assert not blk.history.rows().requires_grad and blk.history.rows().grad_fn is None
