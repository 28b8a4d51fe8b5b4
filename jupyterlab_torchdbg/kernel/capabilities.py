"""What this kernel can offer, reported in ``hello``, found without side effects.

R02: nothing here initialises CUDA. torch is inspected only if the user already imported
it; the device count comes from NVML (which does not create a CUDA context) or, once the
user's own code has initialised CUDA, from torch.
R03/R37: NVML missing or failing is a reason string, never an exception.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from typing import Any


def torch_info() -> dict[str, object]:
    torch = sys.modules.get("torch")
    if torch is not None:
        return {
            "available": True,
            "version": str(getattr(torch, "__version__", "?")),
            "reason": None,
        }
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return {
            "available": False,
            "version": None,
            "reason": "torch is not installed in this kernel's environment",
        }
    try:
        version: str | None = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {
        "available": True,
        "version": version,
        "reason": "installed, not imported yet: monitoring attaches when you import torch",
    }


#: Why TensorBoard export is unavailable (the ``tensorboard`` capability's reason).
TENSORBOARD_MISSING = "install tensorboard in the kernel's environment to export event files"


def tensorboard_installed() -> bool:
    """``tensorboard`` can be imported: found without importing it (loading stays fast)."""
    try:
        return importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):
        return False


def tensorboard_info() -> dict[str, object]:
    """The ``tensorboard`` capability: whether ``export_tensorboard`` can write files."""
    if not tensorboard_installed():
        return {"available": False, "version": None, "reason": TENSORBOARD_MISSING}
    try:
        version: str | None = importlib.metadata.version("tensorboard")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"available": True, "version": version, "reason": None}


class Nvml:
    """A lazily initialised NVML session (nvidia-ml-py). Never raises."""

    def __init__(self) -> None:
        self.module: Any = None  # Any: the pynvml module (untyped), once initialised
        self.reason: str | None = None
        self.driver: str | None = None
        self._tried = False

    def init(self) -> bool:
        if self._tried:
            return self.module is not None
        self._tried = True
        try:
            import pynvml
        except Exception:
            self.reason = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            return False
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.reason = f"NVML unavailable: {type(e).__name__}"
            return False
        self.module = pynvml
        try:
            drv = pynvml.nvmlSystemGetDriverVersion()
            self.driver = drv.decode() if isinstance(drv, bytes) else str(drv)
        except Exception:
            self.driver = None
        return True

    def device_count(self) -> int | None:
        if not self.init():
            return None
        try:
            return int(self.module.nvmlDeviceGetCount())
        except Exception:
            return None

    def info(self) -> dict[str, object]:
        ok = self.init()
        return {"available": ok, "version": self.driver, "reason": None if ok else self.reason}

    def shutdown(self) -> None:
        if self.module is not None:
            try:
                self.module.nvmlShutdown()
            except Exception:
                pass
        self.module = None
        self._tried = False


def cuda_info(nvml: Nvml) -> dict[str, object]:
    torch = sys.modules.get("torch")
    if torch is None:
        return {
            "available": None,
            "initialized": False,
            "device_count": nvml.device_count(),
            "version": None,
            "reason": "torch not imported yet",
        }
    built = getattr(getattr(torch, "version", None), "cuda", None)
    if not built:
        return {
            "available": False,
            "initialized": False,
            "device_count": 0,
            "version": None,
            "reason": "this torch build has no CUDA support",
        }
    initialized = bool(torch.cuda.is_initialized())
    if initialized:
        count: int | None = int(torch.cuda.device_count())
    else:
        count = nvml.device_count()
    reason = None
    if count is None:
        reason = "device count unknown until your code initialises CUDA (NVML unavailable)"
    elif count == 0:
        reason = "no CUDA device visible"
    return {
        "available": None if count is None else count > 0,
        "initialized": initialized,
        "device_count": count,
        "version": str(built),
        "reason": reason,
    }


def supports_subshells(shell: object) -> bool:
    kernel = getattr(shell, "kernel", None)
    try:
        return bool(getattr(kernel, "_supports_kernel_subshells", False))
    except Exception:
        return False


def capabilities(shell: object, nvml: Nvml) -> dict[str, object]:
    return {
        "torch": torch_info(),
        "cuda": cuda_info(nvml),
        "nvml": nvml.info(),
        "subshells": supports_subshells(shell),
        "tensorboard": tensorboard_info(),
    }
