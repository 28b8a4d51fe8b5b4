#!/usr/bin/env bash
# Browser benchmark (not part of CI): JupyterLab in Chromium with the panel open while a
# kernel streams 400 log() series at 250 steps/s, panel visible then hidden.
# Main-thread busy fraction (Chrome DevTools Protocol), fps, kernel messages, composited
# layers and a trace summary (where the main thread's time goes) go to
# ui-tests/bench-results/browser.json. Usage: scripts/bench-browser.sh [--no-build]
# Environment: UI_PORT (default 8891), BENCH_OUT (the JSON file), BENCH_TRACE=0 (no
# traced window) or BENCH_TRACE=keep (also keep the raw trace and CPU profile files).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate
if [ "${1:-}" != "--no-build" ] || [ ! -d jupyterlab_torchdbg/labextension ]; then
  jlpm build
fi
cd ui-tests
export UI_PORT="${UI_PORT:-8891}"
npx playwright test -c playwright.bench.config.js
echo "results: ${BENCH_OUT:-ui-tests/bench-results/browser.json}"
cat "${BENCH_OUT:-bench-results/browser.json}"
