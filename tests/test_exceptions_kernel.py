"""Exception capture and diagnosis in a real ipykernel: one failing cell per category,
cell mapping (R40), replay on connect (R06), quiet exceptions (R19), bounds (R09, R20),
degraded locals (R17) and no references kept (R23).

One kernel serves the whole module (torch imported, extension loaded, one comm open).
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from _exc_helpers import SyncKernel, start_kernel


@pytest.fixture(scope="module")
def k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncKernel]:
    gen = start_kernel(tmp_path_factory.mktemp("exc-kernel"))
    kern = next(gen)
    kern.run(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "%load_ext jupyterlab_torchdbg"
    )
    kern.comm_id = kern.open_comm()  # type: ignore[attr-defined]
    yield kern
    gen.close()


def names(d: dict[str, Any]) -> list[str]:
    return [c["name"] for c in d["diagnosis"]["culprits"]]


def culprit(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in d["diagnosis"]["culprits"] if c["name"] == name)


def focus(d: dict[str, Any]) -> dict[str, Any]:
    assert d["focus"] is not None
    return d["frames"][d["focus"]]


# --- one test per category ------------------------------------------------------------------


def test_device_mismatch_meta_linear_names_model_and_input(k: SyncKernel) -> None:
    d = k.fail(
        "model = nn.Linear(10, 5, device='meta')\nx = torch.randn(4, 10)\nout = model(x)",
        cell_id="cell-device",
    )
    diag = d["diagnosis"]
    assert diag["category"] == "device_mismatch"
    assert set(names(d)) >= {"model", "x"}
    assert culprit(d, "x")["device"] == "cpu"
    assert culprit(d, "model")["devices"] == ["meta"]
    assert "`x` is on cpu" in diag["headline"]
    assert "`model` parameters are on meta" in diag["headline"]
    assert "to_empty" in diag["remedy"]
    f = focus(d)
    assert (f["cell_id"], f["lineno"], f["origin"]) == ("cell-device", 3, "cell")
    assert d["cell_id"] == "cell-device"


def test_tensordataset_size_mismatch_names_both_tensors_100_vs_90(k: SyncKernel) -> None:
    d = k.fail(
        "images = torch.randn(100, 3, 8, 8)\nlabels = torch.randint(0, 10, (90,))\n"
        "ds = torch.utils.data.TensorDataset(images, labels)"
    )
    diag = d["diagnosis"]
    assert diag["category"] == "shape_mismatch"
    assert diag["facts"]["kind"] == "dataset_length"
    assert names(d) == ["images", "labels"]
    assert [c["length"] for c in diag["culprits"]] == [100, 90]
    assert "`images` has 100" in diag["headline"] and "`labels` has 90" in diag["headline"]


def test_mat1_mat2_names_the_linear_layer_and_in_features(k: SyncKernel) -> None:
    d = k.fail(
        "model = nn.Sequential(nn.Linear(20, 10), nn.ReLU(), nn.Linear(12, 5))\n"
        "x = torch.randn(4, 20)\nout = model(x)"
    )
    diag = d["diagnosis"]
    assert diag["category"] == "shape_mismatch"
    assert diag["facts"]["in_features"] == 12 and diag["facts"]["got_features"] == 10
    assert "model.2" in names(d)
    assert "`model.2` (Linear) expects in_features=12" in diag["headline"]
    assert "nn.Linear(10, 5)" in diag["remedy"]


def test_dtype_mismatch_double_input_float_layer(k: SyncKernel) -> None:
    d = k.fail("lin = nn.Linear(3, 2)\nxd = torch.randn(4, 3, dtype=torch.float64)\nlin(xd)")
    diag = d["diagnosis"]
    assert diag["category"] == "dtype_mismatch"
    assert culprit(d, "xd")["dtype"] == "float64"
    assert "`xd` is float64" in diag["headline"] and "float32" in diag["headline"]
    assert "xd = xd.float()" in diag["remedy"]


def test_dtype_mismatch_loss_target_must_be_long(k: SyncKernel) -> None:
    d = k.fail(
        "logits = torch.randn(4, 3)\ntarget = torch.tensor([0., 1., 2., 1.])\n"
        "loss = F.cross_entropy(logits, target)"
    )
    diag = d["diagnosis"]
    assert diag["category"] == "dtype_mismatch"
    assert names(d) == ["target"]
    assert "int64" in diag["headline"] and "target = target.long()" in diag["remedy"]


def test_index_out_of_range_in_loss_names_n_classes_and_label_max(k: SyncKernel) -> None:
    d = k.fail(
        "logits = torch.randn(6, 10)\ny = torch.tensor([0, 1, 10, 3, 9, 2])\n"
        "loss = nn.CrossEntropyLoss()(logits, y)"
    )
    diag = d["diagnosis"]
    assert diag["category"] == "index_out_of_range"
    facts = diag["facts"]
    assert (facts["n_classes"], facts["label"], facts["label_max"]) == (10, 10, 10)
    assert set(names(d)) == {"y", "logits"}
    assert "`y` contains 10" in diag["headline"] and "10 classes" in diag["headline"]


def test_cuda_oom_requested_size_parsed_and_remedy_from_numbers(k: SyncKernel) -> None:
    text = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has "
        "77.90 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, "
        "and 6.50 GiB is reserved by PyTorch but unallocated."
    )
    d = k.fail(f"raise torch.cuda.OutOfMemoryError({text!r})")
    diag = d["diagnosis"]
    assert diag["category"] == "out_of_memory"
    assert diag["facts"]["requested_bytes"] == 2 * 2**30
    assert diag["facts"]["device"] == "cuda:0"
    assert diag["facts"]["fragmentation"] is True
    assert "expandable_segments:True" in diag["remedy"]
    assert "memory" in diag["links"]


def test_inplace_modification_names_tensor_and_version(k: SyncKernel) -> None:
    d = k.fail(
        "w = torch.randn(5, 5, requires_grad=True)\nh = torch.sigmoid(torch.randn(10, 5) @ w)\n"
        "h.mul_(2)\nh.sum().backward()"
    )
    diag = d["diagnosis"]
    assert diag["category"] == "inplace_modification"
    assert diag["facts"]["version"] == 1 and diag["facts"]["expected_version"] == 0
    assert names(d) == ["h"]
    assert "inplace=False" in diag["remedy"] and ".clone()" in diag["remedy"]


def test_device_side_assert_suggests_cuda_launch_blocking(k: SyncKernel) -> None:
    d = k.fail(
        "raise RuntimeError('CUDA error: device-side assert triggered\\nCUDA kernel errors "
        "might be asynchronously reported at some other API call.')"
    )
    diag = d["diagnosis"]
    assert diag["category"] == "device_side_assert"
    assert diag["facts"]["sticky"] is True
    assert "CUDA_LAUNCH_BLOCKING=1" in diag["remedy"] and "restart" in diag["remedy"]


def test_non_finite_loss_named(k: SyncKernel) -> None:
    d = k.fail("loss = torch.tensor(float('nan'))\nassert torch.isfinite(loss), 'diverged'")
    diag = d["diagnosis"]
    assert diag["category"] == "non_finite"
    assert names(d) == ["loss"] and culprit(d, "loss")["finite"] is False
    assert "grads" in diag["links"]


def test_generic_fallback_makes_no_claim(k: SyncKernel) -> None:
    d = k.fail("settings = {'lr': 0.1}\nsettings['momentum']")
    diag = d["diagnosis"]
    assert diag["category"] == "generic"
    assert diag["culprits"] == [] and diag["remedy"] is None
    assert diag["headline"] == "KeyError: 'momentum'"
    assert focus(d)["line"] == "settings['momentum']"


# --- frames, locals, cells ---------------------------------------------------------------------


def test_locals_metadata_and_library_frames_marked(k: SyncKernel) -> None:
    d = k.fail(
        "def train_step(batch):\n    model = nn.Linear(3, 2)\n    scale = 0.5\n"
        "    return model(batch * scale)\ntrain_step(torch.randn(2, 4))"
    )
    f = focus(d)
    assert f["function"] == "train_step" and f["lineno"] == 4
    rows = {r["name"]: r for r in f["locals"]}
    assert rows["batch"]["shape"] == [2, 4] and rows["batch"]["finite"] is True
    assert rows["model"]["params"] == 8 and rows["model"]["in_features"] == 3
    assert rows["scale"]["value"] == 0.5
    inner = d["frames"][-1]
    assert inner["origin"] == "library" and inner["user"] is False
    assert inner["file"].startswith("torch/nn/modules/")  # no absolute or home paths (S6)


def test_r40_cell_mapping_identical_code_and_source_changed(k: SyncKernel) -> None:
    define = "def explode(n):\n    return 1 / n\n"
    k.run(define, cell_id="cell-a")
    k.run(define, cell_id="cell-c")  # identical code in another cell: the later one is live
    d = k.fail("explode(0)", cell_id="cell-b")
    by_fn = {f["function"]: f for f in d["frames"]}
    assert (by_fn["<module>"]["cell_id"], by_fn["<module>"]["lineno"]) == ("cell-b", 1)
    assert (by_fn["explode"]["cell_id"], by_fn["explode"]["lineno"]) == ("cell-c", 2)
    assert by_fn["explode"]["source_changed"] is False
    # cell-c is edited and re-run; `explode` still runs the old code of cell-c
    k.run("old = explode\ndef other():\n    pass\n", cell_id="cell-c")
    d = k.fail("old(0)", cell_id="cell-d")
    frame = next(f for f in d["frames"] if f["function"] == "explode")
    assert frame["cell_id"] == "cell-c" and frame["source_changed"] is True
    assert frame["line"] == "return 1 / n"  # lets the panel compare with the cell's text


def test_r06_late_panel_gets_last_exception_once_as_replay(k: SyncKernel) -> None:
    d = k.fail("raise ValueError('for the late panel')")
    late = k.open_comm()
    replayed = k.messages("exception", late)
    assert len(replayed) == 1
    assert replayed[0]["replay"] is True and replayed[0]["id"] == d["id"]
    assert replayed[0]["time"] == d["time"]
    assert d["replay"] is False
    # the snapshot action re-sends it the same way (before its ack)
    assert k.action(late, "snapshot")["method"] == "ack"
    again = k.messages("exception", late)
    assert len(again) == 2 and again[-1]["replay"] is True and again[-1]["id"] == d["id"]
    # R05: the next failure is broadcast to both comms, live
    cell = k.execute("raise ValueError('to both')")
    got = {c for c, data in cell.comm if data.get("method") == "exception"}
    assert got >= {late, k.comm_id}  # type: ignore[attr-defined]


def test_r19_quiet_exceptions_send_nothing(k: SyncKernel) -> None:
    cells = [
        "raise KeyboardInterrupt",
        "raise SystemExit(3)",
        "import bdb\nraise bdb.BdbQuit()",
        "%this_magic_does_not_exist",
    ]
    for code in cells:
        cell = k.execute(code)
        k.pump(0.2)
        assert cell.exceptions() == [], code
    assert k.fail("raise RuntimeError('still reported')")["exception"]["type"] == "RuntimeError"


def test_r20_syntax_error_in_cell_rendered_with_location(k: SyncKernel) -> None:
    d = k.fail("x = 1\ny = (2 +\n", cell_id="cell-syntax")
    exc = d["exception"]
    assert exc["type"] == "SyntaxError"
    syn = exc["syntax"]
    assert syn["cell_id"] == "cell-syntax" and syn["lineno"] == 2
    assert syn["origin"] == "cell" and syn["text"].startswith("y = (2 +")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is Python 3.11+")
def test_r20_lone_surrogates_and_exception_group(k: SyncKernel) -> None:
    d = k.fail("raise ValueError('bad \\udcff byte')")
    assert "\\udcff" in d["exception"]["message"]
    d = k.fail(
        "raise ExceptionGroup('two', [ValueError('a'), ExceptionGroup('inner', [KeyError('b')])])"
    )
    assert [(g["type"], g["path"]) for g in d["group"]] == [
        ("ValueError", [0]),
        ("KeyError", [1, 0]),
    ]


def test_r17_broken_repr_str_len_on_locals_degrade_quietly(k: SyncKernel) -> None:
    # (An exception whose own __str__ raises breaks IPython's and ipykernel's formatting
    # before the tool runs; the tool's side of that is covered in-process.)
    code = textwrap.dedent(
        """
        calls = []
        class Loud:
            def __repr__(self): calls.append('repr'); raise RuntimeError('repr')
            def __str__(self): calls.append('str'); raise RuntimeError('str')
            def __len__(self): calls.append('len'); raise RuntimeError('len')
            def __bool__(self): calls.append('bool'); raise RuntimeError('bool')
            def __getattr__(self, n): calls.append(n); raise RuntimeError(n)
        class LoudError(Exception):
            def __repr__(self): calls.append('exc repr'); raise RuntimeError('repr')
        def f():
            thing = Loud()
            items = [Loud(), Loud()]
            raise LoudError('plain message')
        f()
        """
    )
    cell = k.execute(code)
    assert [e["ename"] for e in cell.errors] == ["LoudError"]  # the traceback still shows
    d = cell.exceptions()[-1]
    assert d["exception"]["type"] == "LoudError"
    assert d["exception"]["message"] == "plain message"
    rows = {r["name"]: r for r in focus(d)["locals"]}
    assert rows["thing"]["kind"] == "object" and rows["thing"]["text"] == "Loud"
    assert rows["items"]["text"] == "list of 2"
    assert k.run("print(calls)").stdout.strip() == "[]"  # never called by the tool (R21)


def test_r09_deep_recursion_capped_and_marked(k: SyncKernel) -> None:
    # 3,000 frames are covered in-process (test_exceptions_capture): IPython itself needs
    # over a minute to format such a traceback on a small machine.
    d = k.fail(
        "def down(n):\n    if n == 0:\n        raise ValueError('bottom')\n"
        "    return down(n - 1)\ndown(150)"
    )
    assert d["frames_total"] > 150
    assert len(d["frames"]) <= 40 and d["truncated"] is True
    gap = d["elided"][0]
    assert gap["reason"] == "repeated" and gap["count"] > 140
    assert d["frames"][gap["after"]]["function"] == "down"
    assert focus(d)["lineno"] == 3  # the innermost frame is kept


def test_r09_five_megabyte_message_bounded(k: SyncKernel) -> None:
    d = k.fail("raise ValueError('x' * 5_000_000)")
    assert d["exception"]["message_truncated"] is True and d["truncated"] is True
    assert len(json.dumps(d)) < 1_100_000


def test_r23_tool_keeps_no_reference_to_failing_frame_tensors(k: SyncKernel) -> None:
    k.fail(
        "import weakref, gc\n"
        "def holds_big():\n    big = torch.zeros(1_000_000)\n"
        "    global ref\n    ref = weakref.ref(big)\n    raise RuntimeError('boom')\n"
        "holds_big()"
    )
    assert k.run("print(ref() is not None)").stdout.strip() == "True"  # sys.last_traceback
    out = k.run(
        "import sys\nsys.last_value = sys.last_traceback = sys.last_type = None\n"
        "ip = get_ipython()\nip.last_execution_result = None\n"
        "ip.InteractiveTB.tb = None  # IPython's formatter keeps the last traceback too\n"
        "gc.collect()\nprint(ref() is None)"
    )
    assert out.stdout.strip() == "True"


def test_r16_last_value_tb_debug_and_pdb_still_work(k: SyncKernel) -> None:
    k.fail("def g():\n    secret = 41\n    raise LookupError('debug me')\ng()")
    assert k.run("import sys\nprint(type(sys.last_value).__name__)").stdout.strip() == (
        "LookupError"
    )
    tb = k.run("%tb")
    assert [e["ename"] for e in tb.errors] == ["LookupError"]
    dbg = k.execute("%debug", stdin=["p secret + 1", "q"])
    assert any("ipdb" in p for p in dbg.prompts) and "42" in dbg.stdout
    k.run("%pdb on")
    try:
        cell = k.execute(
            "def h():\n    inner = 6 * 7\n    raise ValueError\nh()", stdin=["p inner"]
        )
        assert any("ipdb" in p for p in cell.prompts) and "42" in cell.stdout
        assert cell.exceptions()  # and the tool still reported it
    finally:
        k.run("%pdb off")


COUNT_MONITORS = (
    "ip = get_ipython()\n"
    "print(*[sum(type(getattr(cb, '__self__', None)).__name__ == 'Extension'\n"
    "            for cb in ip.events.callbacks[ev]) for ev in ('pre_run_cell', 'post_run_cell')])"
)


def test_r01_reload_keeps_one_monitor_and_one_message_per_failure(k: SyncKernel) -> None:
    # Last in this module: the reload closes the module's comm.
    k.run("%load_ext jupyterlab_torchdbg")
    assert k.run(COUNT_MONITORS).stdout.split() == ["1", "1"]
    k.run("%reload_ext jupyterlab_torchdbg")
    assert k.run(COUNT_MONITORS).stdout.split() == ["1", "1"]
    comm = k.open_comm()
    assert k.messages("exception", comm) == []  # a reload forgets the old exception
    cell = k.execute("raise ValueError('once')")
    k.pump(0.3)
    assert len(k.messages("exception", comm)) == 1, cell.exceptions()
    k.run("%unload_ext jupyterlab_torchdbg")
    assert k.run(COUNT_MONITORS).stdout.split() == ["0", "0"]
    cell = k.execute("raise ValueError('unloaded')")
    k.pump(0.3)
    assert len(k.messages("exception", comm)) == 1
