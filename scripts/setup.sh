#!/usr/bin/env bash
# Set up everything on a fresh machine: Chromium (for the UI tests), a venv with the
# Python dependencies, the JS build, and the package itself.
#   MODE=editable (default; for development and the demo) or MODE=wheel (build a wheel
#   and install that, as a user would; used by the test command).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${MODE:-editable}"
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

say() { printf '\n== %s\n' "$*"; }

if [ "${SKIP_CHROMIUM:-0}" != "1" ] && ! command -v chromium >/dev/null 2>&1; then
  say "installing Chromium (Debian package) for the UI tests"
  if [ "$(id -u)" = "0" ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip

say "installing Python dependencies (CPU torch)"
# torch is pinned to a CPU build that installs quickly (README "Compatibility": 2.13-2.14 tested).
# datamodel-code-generator: pinned, protocol/messages.py is its output (scripts/gen_protocol_py.py).
# transformers (tests only: GPT-2 from a tiny config) needs no torch of its own: the pin stays.
# tensorboard: export_tensorboard writes event files with it (tests read them back).
python -m pip install -q \
  "torch==2.13.0" numpy pandas \
  "jupyterlab>=4.4,<5" "notebook>=7.2,<8" "ipykernel>=7" "jupyter_server>=2.4" nbclient nbformat \
  nvidia-ml-py pytest "pytest-jupyter[server]>=0.10" hypothesis "jsonschema>=4.18" ruff "mypy>=1.10" \
  "datamodel-code-generator==0.97.0" \
  "transformers>=4.46,<6" tensorboard \
  "hatchling>=1.5" editables "hatch-nodejs-version>=0.3.2" "hatch-jupyter-builder>=0.5" \
  "jupyter-builder>=1.2,<2"

# A stale build would be shipped as is ("Skipping build"): always start clean.
rm -rf jupyterlab_torchdbg/labextension lib tsconfig.tsbuildinfo

if [ "$MODE" = "wheel" ]; then
  say "building the wheel (JS install + production build)"
  rm -rf dist
  python -m pip wheel -q --no-deps --no-build-isolation -w dist .
  python -m pip install -q --force-reinstall --no-deps dist/jupyterlab_torchdbg-*.whl
else
  say "installing the package in editable mode (JS install + build)"
  python -m pip install -q --no-build-isolation -e .
  jupyter labextension develop --overwrite . >/dev/null
fi

say "checking the lab extension is installed"
# Printed with >&2, not `tee /dev/stderr`: tee would open (and truncate) a log file the
# caller redirected stderr to, wiping everything printed before.
EXTENSIONS="$(jupyter labextension list 2>&1)"
printf '%s\n' "$EXTENSIONS" >&2
grep -qE "jupyterlab_torchdbg v[0-9.]+.*enabled.*OK" <<<"$EXTENSIONS"
