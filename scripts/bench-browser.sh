#!/usr/bin/env bash
# Browser benchmarks (not part of CI): JupyterLab in Chromium with the panel open
# - stream: while a kernel streams 400 log() series at 250 steps/s, panel visible then
#   hidden. Main-thread busy fraction (Chrome DevTools Protocol), fps, kernel messages,
#   composited layers and a trace summary (where the main thread's time goes) go to
#   ui-tests/bench-results/browser.json;
# - ranks: the Ranks section with 64 then 256 simulated ranks: busy fraction, fps,
#   `ranks` messages, the panel's nodes, to ui-tests/bench-results/browser-ranks.json.
# Usage: scripts/bench-browser.sh [--no-build] [stream|ranks] (both by default)
# Environment: UI_PORT (default 8891), BENCH_OUT (the JSON file), BENCH_TRACE=0 (no
# traced window) or BENCH_TRACE=keep (also keep the raw trace and CPU profile files).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate
build=1
if [ "${1:-}" = "--no-build" ]; then
  build=0
  shift
fi
if [ "$build" = 1 ] || [ ! -d jupyterlab_torchdbg/labextension ]; then
  jlpm build
fi
which="${1:-}"
case "$which" in
  "" | stream | ranks) ;;
  *)
    echo "usage: scripts/bench-browser.sh [--no-build] [stream|ranks]" >&2
    exit 2
    ;;
esac
cd ui-tests
export UI_PORT="${UI_PORT:-8891}"
npx playwright test -c playwright.bench.config.js ${which:+"bench/$which.bench.ts"}
if [ "$which" != ranks ]; then
  echo "results: ${BENCH_OUT:-ui-tests/bench-results/browser.json}"
  cat "${BENCH_OUT:-bench-results/browser.json}"
fi
if [ "$which" != stream ]; then
  echo "results: ${BENCH_RANKS_OUT:-ui-tests/bench-results/browser-ranks.json}"
  cat "${BENCH_RANKS_OUT:-bench-results/browser-ranks.json}"
fi
