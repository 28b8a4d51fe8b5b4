"""A dataset that raises inside a DataLoader, in a real ipykernel (issue #22 item 6).

torch re-raises a worker's error as ``ValueError: Caught ValueError in DataLoader worker
process 0`` with the worker's traceback as text. The panel's ``exception`` message must
carry the original type and message, the dataset's frame (file:line, function, its cell)
in the stack and as the focus, and the failing sample's index — in the headline too —
for worker processes forked (``num_workers=2``, ``persistent_workers``) and spawned
(``multiprocessing_context="spawn"``), and for ``num_workers=0`` (main process). The
cell's own error output is unchanged (R15). Every comm message is schema-validated.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _exc_helpers import SyncKernel, start_kernel

DATASET = textwrap.dedent(
    """\
    import torch
    from torch.utils.data import Dataset, DataLoader

    class Samples(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            if i == 7:
                raise ValueError(f"sample {i} is corrupt")
            return torch.full((3,), float(i))
    """
)

SPAWN_MODULE = DATASET  # the same class, importable by a spawned worker


@pytest.fixture(scope="module")
def k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncKernel]:
    tmp = tmp_path_factory.mktemp("dl-kernel")
    (tmp / "spawn_samples.py").write_text(SPAWN_MODULE)
    gen = start_kernel(tmp)
    kern = next(gen)
    kern.run(f"import sys; sys.path.insert(0, {str(tmp)!r})\n%load_ext jupyterlab_torchdbg")
    kern.run(DATASET, cell_id="cell-dataset")
    kern.comm_id = kern.open_comm()  # type: ignore[attr-defined]
    yield kern
    gen.close()


def dataset_frame(d: dict[str, Any]) -> dict[str, Any]:
    u = d["unwrapped"]
    assert u["frame"] is not None
    return d["frames"][u["frame"]]


def assert_unwrapped(d: dict[str, Any], where: str) -> None:
    u = d["unwrapped"]
    assert u["where"].startswith(where), u
    assert u["exception"]["type"] == "ValueError"
    assert u["exception"]["module"] == "builtins"
    assert u["exception"]["message"] == "sample 7 is corrupt"
    assert u["index_known"] is True and u["index"] == 7, u
    assert u["batch"] == [4, 5, 6, 7] and u["batch_size"] == 4
    assert u["dataset"] == "Samples"
    diag = d["diagnosis"]
    assert diag["category"] == "data_loader"
    assert "`ValueError: sample 7 is corrupt`" in diag["headline"]
    assert "`Samples.__getitem__`" in diag["headline"]
    assert "sample index 7" in diag["headline"]


def test_worker_error_shows_original_error_dataset_frame_and_index(k: SyncKernel) -> None:
    cell = k.execute(
        "for batch in DataLoader(Samples(), batch_size=4, num_workers=2):\n    pass",
        cell_id="cell-loop",
    )
    # R15: the cell's own error is torch's, unchanged
    (err,) = cell.errors
    assert err["ename"] == "ValueError"
    assert err["evalue"].startswith("Caught ValueError in DataLoader worker process 1")
    (d,) = cell.exceptions()
    assert_unwrapped(d, "DataLoader worker process 1")
    assert d["unwrapped"]["worker_id"] == 1 and isinstance(d["unwrapped"]["pid"], int)
    assert "in DataLoader worker process 1" in d["diagnosis"]["headline"]
    # the dataset's frame: the cell that defined the dataset, the line that raised; it is
    # the focus (the innermost user frame), after the main process's frames
    f = dataset_frame(d)
    assert (f["function"], f["origin"], f["cell_id"], f["lineno"]) == (
        "__getitem__",
        "cell",
        "cell-dataset",
        10,
    )
    assert f["line"] == 'raise ValueError(f"sample {i} is corrupt")'
    assert f["process"] == "DataLoader worker process 1" and f["locals"] == []
    assert d["focus"] == d["unwrapped"]["frame"] == len(d["frames"]) - 1
    user = [(x["function"], x.get("cell_id")) for x in d["frames"] if x["user"]]
    assert user == [("<module>", "cell-loop"), ("__getitem__", "cell-dataset")]
    # the raw wrapper's message is still the exception's own
    assert d["exception"]["message"].startswith("Caught ValueError in DataLoader worker")


def test_main_process_error_names_the_index_from_live_frames(k: SyncKernel) -> None:
    d = k.fail("for batch in DataLoader(Samples(), batch_size=4, num_workers=0):\n    pass")
    assert_unwrapped(d, "the main process")
    f = dataset_frame(d)
    assert f["function"] == "__getitem__" and "process" not in f
    assert {r["name"]: r.get("value") for r in f["locals"]}.get("i") == 7
    assert d["debuggable"] is True and d["focus"] == d["unwrapped"]["frame"]
    assert "num_workers=0" not in (d["diagnosis"]["remedy"] or "")


def test_persistent_workers_error_carries_the_index(k: SyncKernel) -> None:
    d = k.fail(
        "loader = DataLoader(Samples(), batch_size=4, num_workers=2, persistent_workers=True)\n"
        "for batch in loader:\n    pass"
    )
    assert_unwrapped(d, "DataLoader worker process 1")
    k.run("del loader")


def test_spawned_worker_error_carries_the_index(k: SyncKernel) -> None:
    d = k.fail(
        "import spawn_samples\n"
        "for batch in DataLoader(spawn_samples.Samples(), batch_size=4, num_workers=1,\n"
        "                        multiprocessing_context='spawn'):\n    pass",
    )
    assert_unwrapped(d, "DataLoader worker process 0")
    f = dataset_frame(d)
    assert (f["file"], f["origin"], f["lineno"]) == ("spawn_samples.py", "file", 10)
    assert f.get("path") == "spawn_samples.py"


def test_collate_error_gives_the_batch_not_a_guessed_index(k: SyncKernel) -> None:
    # every sample is fine; the batch cannot be stacked: the index is not known
    d = k.fail(
        "class Ragged(Samples):\n"
        "    def __getitem__(self, i):\n"
        "        return torch.zeros(i % 3 + 1)\n"
        "for batch in DataLoader(Ragged(), batch_size=4, num_workers=2):\n    pass"
    )
    u = d["unwrapped"]
    assert u["exception"]["type"] == "RuntimeError"
    assert u["index_known"] is False and u["index"] is None
    assert u["batch"] == [0, 1, 2, 3]
    assert "collate_fn" in u["why_unknown"]
    # the shape rule recognises the original message; the worker is named in a hint
    assert d["diagnosis"]["category"] == "shape_mismatch", d["diagnosis"]
    assert any("DataLoader worker process 0" in h for h in d["diagnosis"]["hints"])


def test_a_worker_started_before_load_gives_no_index_and_says_why(
    tmp_path: Path,
) -> None:
    gen = start_kernel(tmp_path)
    kern = next(gen)
    try:
        kern.run(DATASET)
        # persistent workers forked before the extension loads know nothing of it
        kern.run(
            "loader = DataLoader(Samples(), batch_size=4, num_workers=2, "
            "persistent_workers=True)\nit = iter(loader); first = next(it)"
        )
        kern.run("%load_ext jupyterlab_torchdbg")
        kern.open_comm()
        d = kern.fail("for batch in it:\n    pass")
        u = d["unwrapped"]
        assert u["exception"]["message"] == "sample 7 is corrupt"
        assert u["index_known"] is False and u["index"] is None and u["batch"] is None
        assert "only its traceback text" in u["why_unknown"]
        assert "which sample is not known" in d["diagnosis"]["headline"]
        assert dataset_frame(d)["function"] == "__getitem__"
    finally:
        gen.close()
