#!/usr/bin/env bash
# The ends of the supported range (README "## Compatibility"), each in a venv of its own
# under .venv-ends/ (ignored), running the kernel-side tests that start real kernels
# (and one a real Jupyter server) against that end's versions.
#
#   bash scripts/version-ends.sh [oldest|pythons|newest|all]     (default: oldest)
#
#   oldest: the oldest Python that a torch wheel lies on disk for (3.11), the oldest torch
#           installable here without GBs of CUDA downloads (2.13.0, CPU build), the oldest
#           JupyterLab 4.x / jupyter_server / ipykernel the package claims.
#   pythons: Python 3.10 (oldest; oldest JupyterLab/ipykernel) and 3.13 (newest; newest
#           JupyterLab/ipykernel) WITHOUT torch (no torch wheel for them lies on disk, and
#           the index's are CUDA builds of GBs): the torch-free unit tests, and a real
#           kernel that loads the extension and streams log() without torch.
#   newest: the newest releases of everything (JupyterLab, jupyter_server, ipykernel)
#           with the newest torch the pip cap on this machine allows (2.14.1, a CUDA build
#           from this disk, about 5.5 GB in the venv; it runs on the CPU here).
# The Python kernel side is taken from the work tree (PYTHONPATH), so no JS build is
# needed: only the kernel side and the server route are under test here. Needs
# jupyterlab_torchdbg/_version.py, which scripts/setup.sh writes.
# Pythons are looked up on PATH, then under ~/.pyenv/versions; override with PY_OLDEST /
# PY_NEWEST. Prints each end's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WHICH="${1:-oldest}"

# The pins of each end. Keep them in step with README "## Compatibility" and pyproject.toml.
OLDEST_PY_VERSION=3.11
OLDEST_PINS=("torch==2.13.0" "jupyterlab==4.4.0" "jupyter_server==2.4.0" "ipykernel==7.0.0")
NEWEST_PY_VERSION=3.11
NEWEST_PINS=("torch==2.14.1" "jupyterlab>=4.4,<5" "jupyter_server>=2.4,<3" "ipykernel>=7")
PY_PINS_OLDEST=(3.10 "jupyterlab==4.4.0" "jupyter_server==2.4.0" "ipykernel==7.0.0")
PY_PINS_NEWEST=(3.13 "jupyterlab>=4.4,<5" "jupyter_server>=2.4,<3" "ipykernel>=7")
TORCHLESS_TESTS=(
  tests/test_protocol.py tests/test_stream_packed.py tests/test_ranks_wire.py
  tests/test_settings_schema.py
  "tests/test_kernel_lifecycle.py::test_r03_loads_without_torch_and_without_nvml"
)
# What the tests need besides (unpinned: the newest that fits the pins above).
TEST_DEPS=("pytest>=8" "pytest-jupyter[server]>=0.10" "jsonschema>=4.18" nbclient nbformat numpy
  hypothesis "comm>=0.1.3")
# Tests that start real kernels (grads, memory, exceptions, record, lifecycle, status,
# live streaming, comm clients) and the server's websocket route.
TESTS=(
  tests/test_grads_kernel.py tests/test_memory_kernel.py tests/test_exceptions_kernel.py
  tests/test_record_kernel.py tests/test_kernel_lifecycle.py tests/test_kernel_status.py
  tests/test_stream_live.py tests/test_comm_clients.py tests/test_server_websocket.py
)

say() { printf '\n== %s\n' "$*"; }

find_python() { # find_python 3.11 -> a path
  local v="$1" p
  if p="$(command -v "python$v")"; then printf '%s\n' "$p"; return; fi
  for p in "$HOME"/.pyenv/versions/"$v".*/bin/python"$v"; do
    [ -x "$p" ] && { printf '%s\n' "$p"; return; }
  done
  echo "no python$v found (set PY_OLDEST / PY_NEWEST)" >&2
  return 1
}

run_end() { # run_end NAME PYTHON PINS... (the tests: TESTS, or "${RUN_TESTS[@]}")
  local name="$1" python="$2"
  shift 2
  local tests=("${TESTS[@]}")
  if [ -n "${RUN_TESTS+x}" ]; then tests=("${RUN_TESTS[@]}"); fi
  local venv="$ROOT/.venv-ends/$name" start=$SECONDS
  say "$name end: $("$python" --version) with ${*}"
  if [ ! -x "$venv/bin/python" ]; then "$python" -m venv "$venv"; fi
  "$venv/bin/python" -m pip install -q --upgrade pip 2>&1 | { grep -v "is ignored" || true; }
  "$venv/bin/python" -m pip install -q "$@" "${TEST_DEPS[@]}" 2>&1 | { grep -v "is ignored" || true; }
  "$venv/bin/python" -m pip check >/dev/null || "$venv/bin/python" -m pip check
  say "$name end: installed ($((SECONDS - start)) s)"
  "$venv/bin/python" - <<'EOF'
import importlib.metadata as md
import sys
def version(n: str) -> str:
    try:
        return md.version(n)
    except md.PackageNotFoundError:
        return "(none)"
names = ["torch", "jupyterlab", "jupyter_server", "ipykernel", "jupyter_client", "comm"]
print("python", sys.version.split()[0], *(f"{n} {version(n)}" for n in names))
EOF
  test -f jupyterlab_torchdbg/_version.py || {
    echo "jupyterlab_torchdbg/_version.py is missing: run scripts/setup.sh first" >&2
    return 1
  }
  # The venv's own python starts the kernels (pytest-jupyter's python3 kernel spec).
  PATH="$venv/bin:$PATH" PYTHONPATH="$ROOT" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"
  say "$name end: passed in $((SECONDS - start)) s"
}

case "$WHICH" in
  oldest | pythons | newest | all) ;;
  *) echo "usage: $0 [oldest|pythons|newest|all]" >&2; exit 2 ;;
esac
if [ "$WHICH" = oldest ] || [ "$WHICH" = all ]; then
  run_end oldest "${PY_OLDEST:-$(find_python "$OLDEST_PY_VERSION")}" "${OLDEST_PINS[@]}"
fi
if [ "$WHICH" = pythons ] || [ "$WHICH" = all ]; then
  RUN_TESTS=("${TORCHLESS_TESTS[@]}")
  for pins in PY_PINS_OLDEST PY_PINS_NEWEST; do
    declare -n p="$pins"
    run_end "py${p[0]}" "$(find_python "${p[0]}")" "${p[@]:1}"
    unset -n p
  done
  unset RUN_TESTS
fi
if [ "$WHICH" = newest ] || [ "$WHICH" = all ]; then
  run_end newest "${PY_NEWEST:-$(find_python "$NEWEST_PY_VERSION")}" "${NEWEST_PINS[@]}"
fi
