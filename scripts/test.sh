#!/usr/bin/env bash
# The whole test suite from a fresh clone: set up (Chromium, venv, wheel build), lint,
# jest, pytest with real kernels, a wheel install check, and Galata in Chromium.
# Exits non-zero if anything fails. Screenshots land in artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

MODE=wheel bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate

say() { printf '\n== %s\n' "$*"; }

say "lint: ruff"
ruff check .
ruff format --check .

say "types: mypy (settings in pyproject.toml)"
mypy

say "lint: eslint, prettier, stylelint"
jlpm lint:check

say "protocol: src/protocol/generated.ts and protocol/messages.py match the schema"
jlpm gen:protocol:check

say "jest"
jlpm test --ci

say "pytest (real kernels, real server websocket)"
python -m pytest -q -p no:cacheprovider

say "the wheel alone, in a fresh venv (installing a wheel never needs node)"
rm -rf /tmp/torchdbg-wheel-venv
python -m venv /tmp/torchdbg-wheel-venv
/tmp/torchdbg-wheel-venv/bin/python -m pip install -q dist/jupyterlab_torchdbg-*.whl "jupyterlab>=4.4,<5"
(
  cd /tmp
  /tmp/torchdbg-wheel-venv/bin/jupyter labextension list 2>&1 \
    | grep -E "jupyterlab_torchdbg v[0-9.]+.*enabled.*OK"
  /tmp/torchdbg-wheel-venv/bin/python -c \
    "import sys, jupyterlab_torchdbg; assert 'torch' not in sys.modules; print('import ok')"
)

say "Galata (Chromium)"
cd "$ROOT/ui-tests"
jlpm install
rm -rf test-results
npx playwright test
say "the browser benchmarks load (listed, not run: scripts/bench-browser.sh)"
npx playwright test -c playwright.bench.config.js --list

say "Galata's neighbour: the panel in Jupyter Notebook 7 (Chromium)"
npx playwright test -c playwright.notebook7.config.js
mkdir -p "$ROOT/artifacts"
find test-results test-results-notebook7 -name '*.png' -exec cp {} "$ROOT/artifacts/" \; 2>/dev/null || true

say "the ends of the supported range: the oldest (kernel tests, then the panel in JupyterLab 4.4.0), and Python 3.10/3.13 without torch"
# (README "## Compatibility"; 5-7 minutes with the installs; the newest end, torch
# 2.14.1 at 5.5 GB, is a separate command: bash scripts/version-ends.sh newest)
cd "$ROOT"
bash scripts/version-ends.sh oldest ui-oldest pythons
find ui-tests/test-results-lab-oldest -name '*.png' -exec cp {} "$ROOT/artifacts/" \; 2>/dev/null || true

say "all tests passed"
