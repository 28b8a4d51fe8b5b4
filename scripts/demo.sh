#!/usr/bin/env bash
# Set up everything and open JupyterLab on the demo notebook (a small CPU model).
set -euo pipefail
cd "$(dirname "$0")/.."
SKIP_CHROMIUM=1 bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
exec jupyter lab --notebook-dir=examples examples/demo.ipynb "$@"
