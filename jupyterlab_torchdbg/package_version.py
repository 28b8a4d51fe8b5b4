"""The package's version, in a module of its own so the kernel side can read it without
importing the package's public API (which imports the kernel side: a circle)."""

from __future__ import annotations

try:
    from ._version import __version__  # written by the build
except ImportError:  # a source tree next to an installed wheel (e.g. tests from a clone)
    try:
        from importlib.metadata import version as _dist_version

        __version__ = _dist_version("jupyterlab_torchdbg")
    except Exception:
        __version__ = "0.0.0.dev0"

__all__ = ["__version__"]
