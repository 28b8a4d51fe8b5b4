#!/usr/bin/env bash
# Set up everything and open JupyterLab on the demo notebook (a small CPU model).
#
# The notebook's URL (with its token) is printed on the last line, so it also works with
# --no-browser or from a machine without a browser: JupyterLab's own log prints the
# launcher's URL, not the notebook's.
set -euo pipefail
cd "$(dirname "$0")/.."
SKIP_CHROMIUM=1 bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
# JupyterLab refuses to start as root unless told (containers and CI-like machines run as root).
ROOT_FLAG=()
if [ "$(id -u)" = "0" ]; then ROOT_FLAG=(--allow-root); fi
PORT="${DEMO_PORT:-$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
# The token travels in the environment (not on the command line, where `ps` shows it).
JUPYTER_TOKEN="${JUPYTER_TOKEN:-$(python -c 'import secrets; print(secrets.token_hex(24))')}"
export JUPYTER_TOKEN
URL="http://localhost:${PORT}/lab/tree/demo.ipynb?token=${JUPYTER_TOKEN}"
(
  # Print the notebook's URL once the server answers.
  for _ in $(seq 1 120); do
    if python -c "import urllib.request as u; u.urlopen('http://localhost:${PORT}/api/status?token=${JUPYTER_TOKEN}', timeout=1)" 2>/dev/null; then
      printf '\n  The demo notebook: %s\n\n' "$URL" >&2
      exit 0
    fi
    sleep 1
  done
) &
exec jupyter lab --notebook-dir=examples --port="$PORT" --ServerApp.port_retries=0 \
  "${ROOT_FLAG[@]}" examples/demo.ipynb "$@"
