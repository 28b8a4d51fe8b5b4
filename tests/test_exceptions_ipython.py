"""IPython's own error path is unchanged by the extension: the iopub ``error`` and the
``execute_reply`` (R15), nbclient's CellExecutionError (R15), and another library's
custom exception handler, before and after unload (R18)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _exc_helpers import SyncKernel, start_kernel
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

FAILING = "def divide(a, b):\n    return a / b\ndivide(1, 0)"


@pytest.fixture(scope="module")
def k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncKernel]:
    gen = start_kernel(tmp_path_factory.mktemp("exc-ipython"))
    yield next(gen)
    gen.close()


def _normalise(text: str) -> str:
    """Execution counts differ between the two runs; nothing else may."""
    return re.sub(r"In\[\d+\]", "In[N]", text)


def _error_view(cell: Any) -> dict[str, Any]:
    content = cell.reply["content"]
    return {
        "status": content["status"],
        "reply": {k: _normalise(str(content.get(k))) for k in ("ename", "evalue", "traceback")},
        "errors": [
            {
                "ename": e["ename"],
                "evalue": e["evalue"],
                "traceback": [_normalise(t) for t in e["traceback"]],
            }
            for e in cell.errors
        ],
        "stdout": cell.stdout,
        "stderr": cell.stderr,
    }


def test_r15_same_error_and_reply_with_and_without_extension(k: SyncKernel) -> None:
    without = _error_view(k.execute(FAILING))
    k.run("import torch\n%load_ext jupyterlab_torchdbg")
    k.open_comm()
    cell = k.execute(FAILING)
    assert _error_view(cell) == without
    assert cell.exceptions(), "the tool reported it as well"
    k.run("%unload_ext jupyterlab_torchdbg")


BACKWARD_FAILS = "import torch\nx = torch.ones(2)\nx.sum().backward()"


def test_r15_an_error_in_backward_shows_the_same_frames_with_the_extension(
    k: SyncKernel,
) -> None:
    """The tool looks at the start of every backward pass (backward_start.py) without a
    frame of its own on the way to torch's engine: the traceback of an error raised in
    the engine is the same, frame for frame (a wrapper would have added one)."""
    without = _error_view(k.execute(BACKWARD_FAILS))
    k.run("%load_ext jupyterlab_torchdbg")
    cell = k.execute(BACKWARD_FAILS)
    assert _error_view(cell) == without
    assert "does not require grad" in without["reply"]["evalue"]
    k.run("%unload_ext jupyterlab_torchdbg")


def test_r18_custom_exception_handler_kept_and_restored(k: SyncKernel) -> None:
    k.run(
        "def _handler(self, etype, value, tb, tb_offset=None):\n"
        "    print('CUSTOM HANDLED', etype.__name__)\n"
        "    return ['custom']\n"
        "get_ipython().set_custom_exc((ValueError,), _handler)\n"
        "_before = (get_ipython().custom_exceptions, get_ipython().CustomTB)"
    )
    k.run("%load_ext jupyterlab_torchdbg")
    comm = k.open_comm()
    cell = k.execute("raise ValueError('theirs')")
    assert "CUSTOM HANDLED ValueError" in cell.stdout
    (msg,) = cell.exceptions(comm)
    assert msg["exception"]["type"] == "ValueError" and msg["frames"]
    k.run("%unload_ext jupyterlab_torchdbg")
    out = k.run("print(_before == (get_ipython().custom_exceptions, get_ipython().CustomTB))")
    assert out.stdout.strip() == "True"
    assert "CUSTOM HANDLED" in k.execute("raise ValueError('again')").stdout
    k.run("get_ipython().set_custom_exc((), None)")


def _run_notebook(tmp_path: Path, first: str) -> CellExecutionError:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(first), nbformat.v4.new_code_cell(FAILING)]
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    with pytest.raises(CellExecutionError) as info:
        client.execute()
    return info.value


def test_r15_nbclient_raises_the_same_cell_execution_error(tmp_path: Path) -> None:
    plain = _run_notebook(tmp_path, "import torch")
    loaded = _run_notebook(tmp_path, "import torch\n%load_ext jupyterlab_torchdbg")
    assert (
        (loaded.ename, loaded.evalue)
        == (plain.ename, plain.evalue)
        == (
            "ZeroDivisionError",
            "division by zero",
        )
    )
    assert _normalise(str(loaded)) == _normalise(str(plain))
