"""Shared fixtures: real kernels through pytest-jupyter, driven by tests/kernel_client.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kernel_client import KernelDriver

pytest_plugins = ["pytest_jupyter.jupyter_client", "pytest_jupyter.jupyter_server"]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def kernel_env() -> dict[str, str]:
    """Environment for kernels: quiet, deterministic, no GPU surprises."""
    return {"PYTHONWARNINGS": "ignore::DeprecationWarning", "OMP_NUM_THREADS": "1"}


@pytest.fixture
def kernel(
    jp_start_kernel: Callable, jp_asyncio_loop: Any, kernel_env: dict[str, str]
) -> Iterator[KernelDriver]:
    """A real ipykernel with nothing loaded."""
    env = {**os.environ, **kernel_env}
    _km, kc = jp_asyncio_loop.run_until_complete(jp_start_kernel(env=env))
    yield KernelDriver(kc)


@pytest.fixture
def loaded(kernel: KernelDriver, jp_asyncio_loop: Any) -> Iterator[KernelDriver]:
    """A real ipykernel with torch imported and the extension loaded."""
    jp_asyncio_loop.run_until_complete(kernel.run("import torch\n%load_ext jupyterlab_torchdbg"))
    yield kernel
