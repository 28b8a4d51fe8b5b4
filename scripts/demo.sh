#!/usr/bin/env bash
# Set up everything and open JupyterLab on the demo notebook (a small CPU model).
set -euo pipefail
cd "$(dirname "$0")/.."
SKIP_CHROMIUM=1 bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
# JupyterLab refuses to start as root unless told (containers and CI-like machines run as root).
ROOT_FLAG=()
if [ "$(id -u)" = "0" ]; then ROOT_FLAG=(--allow-root); fi
exec jupyter lab --notebook-dir=examples "${ROOT_FLAG[@]}" examples/demo.ipynb "$@"
