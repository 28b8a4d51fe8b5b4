#!/usr/bin/env bash
# Ranks on two hosts, for real (issue #25; not in CI's default path when it cannot run):
# two network namespaces joined by a veth pair stand for two machines, the kernel's side
# listens on TCP on host A, and `torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d`
# runs once on each host with what ranks_env() says to export; the four ranks must attach
# over TCP with their host names and end at the last step, and a process with another key
# is refused (tests/test_ranks_multihost.py). Needs root, iproute2 (ip netns) and
# util-linux (unshare); the namespaces, veth pair and /etc/netns/<name> files it makes
# are removed at the end, whatever happens.
# Usage: scripts/multihost-test.sh [STEPS]   (default 200 steps a rank; ~1 min)
# Environment: PYTHON (default .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if [ "$(id -u)" != 0 ]; then
  echo "multihost-test: needs root (network namespaces); try: sudo -E $0 $*" >&2
  exit 2
fi
export TORCHDBG_MULTIHOST_STEPS="${1:-200}"
export TORCHDBG_MULTIHOST_TIMEOUT_S="${TORCHDBG_MULTIHOST_TIMEOUT_S:-300}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m pytest -p no:cacheprovider -q -rs tests/test_ranks_multihost.py
