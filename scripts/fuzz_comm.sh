#!/usr/bin/env bash
# The comm fuzz test (tests/test_fuzz_comm.py, R43) at a larger size than CI's 10,000
# messages. Usage: scripts/fuzz_comm.sh [MESSAGES] [SEED]
#   MESSAGES  number of generated messages (default 200000; ~7 ms each on 2 cores)
#   SEED      a hypothesis seed for other messages than CI's fixed ones (default: CI's)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
export TORCHDBG_FUZZ_EXAMPLES="${1:-200000}"
if [ -n "${2:-}" ]; then export TORCHDBG_FUZZ_SEED="$2"; fi
exec "$VENV/bin/python" -m pytest -q -s -p no:cacheprovider tests/test_fuzz_comm.py
