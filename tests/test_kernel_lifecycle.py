"""Loading, unloading, the handshake and capabilities, in a real ipykernel."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

from kernel_client import KernelDriver, validate_kernel_message

from jupyterlab_torchdbg.protocol import LOADED_TARGET, PROTOCOL_VERSION

COUNT_HANDLERS = textwrap.dedent(
    """
    import comm
    ip = get_ipython()
    def _n(ev):
        return sum(
            1 for cb in ip.events.callbacks[ev]
            if 'jupyterlab_torchdbg' in getattr(cb, '__module__', '') or
               'jupyterlab_torchdbg' in type(getattr(cb, '__self__', None)).__module__
        )
    _mgr = ip.kernel.comm_manager
    print(_n('pre_run_cell'), _n('post_run_cell'),
          int('jupyterlab_torchdbg' in _mgr.targets))
    """
)


def test_import_does_not_import_torch() -> None:
    """The server imports the package to find the labextension: it must stay light."""
    code = (
        "import sys, jupyterlab_torchdbg as j; "
        "assert j._jupyter_labextension_paths()[0]['dest'] == 'jupyterlab_torchdbg'; "
        "print('torch' in sys.modules, 'jupyterlab_torchdbg.kernel.extension' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


async def test_r01_load_twice_reload_unload(kernel: KernelDriver) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg")
    once = (await kernel.run(COUNT_HANDLERS)).stdout.split()
    pre, post, target = (int(v) for v in once)
    assert pre >= 1 and post >= 1 and target == 1
    await kernel.run("%load_ext jupyterlab_torchdbg")
    assert (await kernel.run(COUNT_HANDLERS)).stdout.split() == once
    await kernel.run("%reload_ext jupyterlab_torchdbg")
    assert (await kernel.run(COUNT_HANDLERS)).stdout.split() == once
    await kernel.run("%unload_ext jupyterlab_torchdbg")
    assert (await kernel.run(COUNT_HANDLERS)).stdout.split() == ["0", "0", "0"]
    # and it comes back cleanly
    await kernel.run("%load_ext jupyterlab_torchdbg")
    assert (await kernel.run(COUNT_HANDLERS)).stdout.split() == once


async def test_r01_unload_closes_open_comms(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    assert comm_id not in loaded.closed
    await loaded.run("%unload_ext jupyterlab_torchdbg")
    await loaded.pump_until(lambda: comm_id in loaded.closed, timeout=10)
    # a new comm now finds no target: ipykernel closes it at once (panel: "not loaded")
    again = await loaded.open_comm()
    assert again in loaded.closed
    assert not loaded.messages("hello", again)


def _loaded_opens(k: KernelDriver) -> list[dict[str, Any]]:
    """The kernel-initiated ``comm_open``s on LOADED_TARGET seen on iopub, in order."""
    return [
        m["content"]
        for m in k.iopub
        if m["msg_type"] == "comm_open" and m["content"].get("target_name") == LOADED_TARGET
    ]


async def test_r04_every_load_announces_itself_so_panels_reattach(kernel: KernelDriver) -> None:
    """Issue #22: ``%unload_ext`` then ``%load_ext`` typed by hand left the panel on "kernel
    side is not loaded". Each load now opens (and at once closes) a comm of its own to every
    frontend, carrying the session id its hello will have; a second load that changes
    nothing says nothing."""
    await kernel.run("%load_ext jupyterlab_torchdbg")
    await kernel.pump_until(lambda: len(_loaded_opens(kernel)) == 1)
    first = _loaded_opens(kernel)[0]
    validate_kernel_message(first["data"])
    assert first["data"]["method"] == "loaded"
    await kernel.pump_until(lambda: first["comm_id"] in kernel.kernel_closed)
    comm_id = await kernel.open_comm()
    hello = kernel.messages("hello", comm_id)[0].data
    assert hello["session_id"] == first["data"]["session_id"]

    await kernel.run("%load_ext jupyterlab_torchdbg")  # already loaded: no-op
    await kernel.run("%unload_ext jupyterlab_torchdbg")
    await kernel.pump_until(lambda: comm_id in kernel.closed)
    assert len(_loaded_opens(kernel)) == 1
    await kernel.run("%load_ext jupyterlab_torchdbg")
    await kernel.pump_until(lambda: len(_loaded_opens(kernel)) == 2)
    again = _loaded_opens(kernel)[1]["data"]
    assert again["session_id"] != first["data"]["session_id"]
    reopened = await kernel.open_comm()
    assert kernel.messages("hello", reopened)[0].data["session_id"] == again["session_id"]


async def test_hello_then_snapshot(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    mine = [m for m in loaded.comm if m.comm_id == comm_id]
    assert [m.method for m in mine[:2]] == ["hello", "snapshot"]
    hello = mine[0].data
    assert hello["accepted"] is True
    assert hello["protocol_version"] == PROTOCOL_VERSION
    caps = hello["capabilities"]
    assert caps["torch"]["available"] is True
    assert caps["torch"]["version"].startswith("2.")
    # ipykernel 7 has subshells: actions are handled while a cell runs
    assert caps["subshells"] is True
    assert {"snapshot", "clear_history"} <= set(hello["actions"])


async def test_r02_cpu_session_never_initialises_cuda(kernel: KernelDriver) -> None:
    await kernel.run("import torch\n%load_ext jupyterlab_torchdbg")
    comm_id = await kernel.open_comm()
    await kernel.run(
        "from jupyterlab_torchdbg import log\nfor i in range(50): log(loss=torch.tensor(1.0))"
    )
    assert await kernel.value("torch.cuda.is_initialized()") == "False"
    hello = kernel.messages("hello", comm_id)[0].data
    assert hello["capabilities"]["cuda"]["initialized"] is False
    # a fork-based DataLoader still works after loading
    r = await kernel.run(
        textwrap.dedent(
            """
            from torch.utils.data import DataLoader, TensorDataset
            dl = DataLoader(TensorDataset(torch.arange(8.)), batch_size=4, num_workers=2,
                            multiprocessing_context='fork')
            print(sum(b[0].sum().item() for b in dl))
            """
        )
    )
    assert r.stdout.strip() == "28.0"
    # CUDA_VISIBLE_DEVICES set in a later cell still takes effect (nothing cached it)
    await kernel.run("import os; os.environ['CUDA_VISIBLE_DEVICES'] = ''")
    assert await kernel.value("torch.cuda.device_count()") == "0"


async def test_r03_loads_without_torch_and_without_nvml(kernel: KernelDriver) -> None:
    # Make torch and pynvml unimportable in this kernel, as in an environment without them.
    await kernel.run("import sys\nsys.modules['torch'] = None\nsys.modules['pynvml'] = None")
    r = await kernel.run("%load_ext jupyterlab_torchdbg")
    assert r.stderr == ""
    comm_id = await kernel.open_comm()
    caps = kernel.messages("hello", comm_id)[0].data["capabilities"]
    assert caps["torch"]["available"] is False or caps["torch"]["reason"]
    assert caps["nvml"]["available"] is False
    assert "nvidia-ml-py" in caps["nvml"]["reason"]
    # log() of plain numbers still works without torch
    await kernel.run("from jupyterlab_torchdbg import log\nlog(loss=1.5)")
    series = kernel.messages("series")
    assert any("loss" in (names or []) for m in series for names in m.names or [])


async def test_r03_nvml_library_missing_is_a_reason(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm()
    nvml = loaded.messages("hello", comm_id)[0].data["capabilities"]["nvml"]
    # no GPU driver on this machine: the reason names the NVML error, never raises
    assert nvml["available"] is False
    assert nvml["reason"]


async def test_r07_major_version_mismatch_refused(loaded: KernelDriver) -> None:
    comm_id = await loaded.open_comm(protocol_version="1.0")  # the pre-name-table panel
    await loaded.pump_until(lambda: comm_id in loaded.closed, timeout=10)
    hello = loaded.messages("hello", comm_id)[0].data
    assert hello["accepted"] is False
    err = loaded.messages("error", comm_id)[0].data
    assert err["code"] == "protocol_mismatch"
    assert PROTOCOL_VERSION in err["message"] and "1.0" in err["message"]
    assert not loaded.messages("snapshot", comm_id)


async def test_r07_minor_difference_accepted(loaded: KernelDriver) -> None:
    same_major = PROTOCOL_VERSION.split(".")[0] + ".7"
    comm_id = await loaded.open_comm(protocol_version=same_major)
    assert loaded.messages("hello", comm_id)[0].data["accepted"] is True
    assert loaded.messages("snapshot", comm_id)


async def test_r11_send_failure_does_not_break_the_cell(loaded: KernelDriver) -> None:
    await loaded.open_comm()
    r = await loaded.execute(
        textwrap.dedent(
            """
            from jupyterlab_torchdbg.kernel.extension import current
            from jupyterlab_torchdbg import log
            ext = current()
            for c in list(ext.hub._comms.values()):
                def boom(*a, **k):
                    raise RuntimeError('socket gone')
                c.send = boom
            for i in range(200):
                log(loss=float(i))
            ext.stream.flush()
            print('finished', ext.errors['send'] >= 1)
            """
        )
    )
    assert r.ok, r.errors
    assert r.stdout.strip() == "finished True"


async def test_torch_imported_after_load_updates_capabilities(kernel: KernelDriver) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg")
    comm_id = await kernel.open_comm()
    first = kernel.messages("hello", comm_id)[0].data["capabilities"]
    assert first["cuda"]["reason"] == "torch not imported yet"
    await kernel.run("import torch")
    await kernel.pump_until(lambda: len(kernel.messages("hello", comm_id)) == 2, timeout=10)
    second = kernel.messages("hello", comm_id)[1].data
    assert second["session_id"] == kernel.messages("hello", comm_id)[0].data["session_id"]
    assert second["capabilities"]["cuda"]["available"] is False  # CPU build
    assert await kernel.value("torch.cuda.is_initialized()") == "False"


async def test_torch_imported_mid_cell_attaches_before_training(kernel: KernelDriver) -> None:
    """import torch and train in one cell: the step hook is there for that same cell."""
    await kernel.run("%load_ext jupyterlab_torchdbg")
    r = await kernel.run(
        textwrap.dedent(
            """
            import sys
            finders = [type(f).__name__ for f in sys.meta_path]
            import torch
            from jupyterlab_torchdbg.kernel.extension import current
            print(finders.count('TorchImportWatcher'), current()._torch_attached,
                  [type(f).__name__ for f in sys.meta_path].count('TorchImportWatcher'))
            """
        )
    )
    assert r.stdout.split() == ["1", "True", "0"]


async def test_unload_removes_the_torch_import_watcher(kernel: KernelDriver) -> None:
    await kernel.run("%load_ext jupyterlab_torchdbg\n%unload_ext jupyterlab_torchdbg")
    r = await kernel.run(
        "import sys\nprint([type(f).__name__ for f in sys.meta_path].count('TorchImportWatcher'))"
    )
    assert r.stdout.strip() == "0"
