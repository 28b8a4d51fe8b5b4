#!/usr/bin/env bash
# The GPU check, in one command, for a lent GPU machine (no network there): installs the
# wheels carried in .whl/ (scripts/gpu-wheels.sh makes them) into /tmp/site, runs tests/gpu
# against the source tree (no build: the package's kernel side is pure Python), then the
# bench on CUDA: --quick always, the full run if the time left allows. Everything it prints
# goes to $OUT/gpu-check.log; JSON and JUnit files land in $OUT too (4 files at most).
# Ends inside GPU_CHECK_SECONDS (default 420) and exits non-zero if the install, a test or
# the quick bench fails, or (on CUDA) if CUDA is missing or a GPU test was skipped.
#
#   bash scripts/gpu-check.sh                     # on the GPU machine (carry .whl)
#   GPU_CHECK_DEVICE=cpu PYTHON=/tmp/venv/bin/python WHEELS=/tmp/w GPU_CHECK_SITE=/tmp/w-site \
#     bash scripts/gpu-check.sh                   # a rehearsal without a GPU (tests skip)
# GPU_CHECK_SITE (default /tmp/site) is emptied first. GPU_CHECK_FULL_SECONDS (default 180)
# caps the full bench; 0 skips it.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
ROOT=$PWD

PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${GPU_CHECK_SITE:-/tmp/site}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
BUDGET=${GPU_CHECK_SECONDS:-420}
OUT=${OUT:-$ROOT/artifacts/gpu-check}
mkdir -p "$OUT"

export PYTHONUNBUFFERED=1
# Kernels started by the tests inherit all of this: the carried packages, then the repo.
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
scratch=$(mktemp -d /tmp/gpu-check.XXXXXX)
export JUPYTER_CONFIG_DIR=$scratch/jupyter-config JUPYTER_DATA_DIR=$scratch/jupyter-data
export JUPYTER_RUNTIME_DIR=$scratch/jupyter-runtime IPYTHONDIR=$scratch/ipython
export MPLBACKEND=Agg

START=$SECONDS
left() { echo $((BUDGET - (SECONDS - START))); }
say() { printf '\n== [%ss] %s\n' "$((SECONDS - START))" "$*"; }
# step SECONDS CMD...: CMD under a time limit (never past the budget's end, minus a margin).
step() {
  local limit=$1 cap
  shift
  cap=$(($(left) - 10))
  [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$limit" -lt 5 ]; then
    echo "(skipped: no time left)"
    return 124
  fi
  timeout -k 10 "$limit" "$@"
}

main() {
  local failed=0 rc
  say "machine"
  date -u +%Y-%m-%dT%H:%M:%SZ
  uname -srm
  ldd --version 2>/dev/null | head -n 1
  if command -v nvidia-smi >/dev/null; then
    step 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  else
    echo "no nvidia-smi"
  fi

  say "install the carried wheels into $SITE"
  rm -rf "$SITE"
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    local f
    for f in "$WHEELS"/*.whl; do printf '%s ' "${f##*/}"; done
    echo
    if ! step 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$SITE" "$WHEELS"/*.whl; then
      echo "FAILED: the install"
      return 1
    fi
  elif "$PY" -c "import comm, ipykernel, jsonschema, jupyter_client" 2>/dev/null; then
    echo "no wheels in $WHEELS; the kernel stack is installed already"
  else
    echo "FAILED: no wheels in $WHEELS (run scripts/gpu-wheels.sh here and carry .whl)"
    return 1
  fi

  say "versions"
  step 60 "$PY" - "$DEVICE" <<'EOF' || return 1
import importlib.metadata as md, platform, sys
print("python", platform.python_version(), sys.executable)
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, f"sm_{p.major}{p.minor}", f"{p.total_memory / 2**30:.0f} GiB",
          "count", torch.cuda.device_count())
import jupyterlab_torchdbg
print("jupyterlab_torchdbg", jupyterlab_torchdbg.__version__, jupyterlab_torchdbg.__file__)
import comm, ipykernel, IPython, jsonschema, jupyter_client, zmq  # noqa: F401
for name in ("ipykernel", "ipython", "jupyter_client", "comm", "pyzmq", "tornado",
             "traitlets", "jsonschema", "pytest", "pytest-timeout", "numpy",
             "nvidia-ml-py", "psutil", "attrs", "packaging", "pygments",
             "python-dateutil", "typing_extensions"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} MISSING")
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("FAILED: CUDA is not available to torch")
EOF

  say "pytest tests/gpu"
  # --noconftest: tests/conftest.py loads pytest-jupyter's plugins (jupyter_server), which
  # tests/gpu does not use and the GPU machine lacks. pytest-timeout is on that machine.
  local per_test=()
  "$PY" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout 150)
  step 300 "$PY" -m pytest -q -rfEs --noconftest -p no:cacheprovider "${per_test[@]}" \
    --junitxml "$OUT/pytest-gpu.xml" tests/gpu
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAILED: pytest tests/gpu (exit $rc)"
    failed=1
  fi
  if [ "$DEVICE" = cuda ] && [ -f "$OUT/pytest-gpu.xml" ] &&
    ! "$PY" - "$OUT/pytest-gpu.xml" <<'EOF'; then
import sys, xml.etree.ElementTree as ET
suites = ET.parse(sys.argv[1]).getroot().iter("testsuite")
n, skipped = 0, 0
for s in suites:
    n += int(s.get("tests", 0))
    skipped += int(s.get("skipped", 0))
print(f"tests/gpu: {n} tests, {skipped} skipped")
sys.exit(1 if skipped or not n else 0)
EOF
    echo "FAILED: GPU tests were skipped on the GPU machine"
    failed=1
  fi

  say "bench --device $DEVICE --quick"
  if ! step 150 "$PY" -m jupyterlab_torchdbg.bench --device "$DEVICE" --quick \
    --json "$OUT/bench-$DEVICE.json"; then
    echo "FAILED: the quick bench"
    failed=1
  fi

  # The full run only where the time left is comfortably more than it should take
  # (GPU_CHECK_FULL_SECONDS=0: never).
  local full=${GPU_CHECK_FULL_SECONDS:-180}
  if [ "$full" -le 0 ]; then
    say "full bench not asked for"
  elif [ "$(left)" -gt $((full + 30)) ]; then
    say "bench --device $DEVICE (full, at most ${full}s; not a failure if cut short)"
    step "$full" "$PY" -m jupyterlab_torchdbg.bench --device "$DEVICE" \
      --json "$OUT/bench-$DEVICE-full.json"
    rc=$?
    [ "$rc" -eq 124 ] && echo "(the full bench ran out of time: no bench-$DEVICE-full.json)"
  else
    say "full bench skipped: $(left)s left"
  fi

  say "done in $((SECONDS - START))s: $([ "$failed" -eq 0 ] && echo PASSED || echo FAILED)"
  return "$failed"
}

main 2>&1 | tee "$OUT/gpu-check.log"
status=${PIPESTATUS[0]}
rm -rf "$scratch"
exit "$status"
