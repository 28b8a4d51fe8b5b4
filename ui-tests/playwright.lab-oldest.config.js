/**
 * The panel in the oldest supported JupyterLab (issue #26): the spec of `apps/` against
 * a `jupyter lab` of the venv on PATH. `scripts/version-ends.sh ui-oldest` runs it with
 * JupyterLab 4.4.0, jupyter_server 2.4.0 and ipykernel 7.0.0 (plain Playwright: Galata's
 * helpers follow the newest JupyterLab).
 */
const base = require('./playwright.config');

const port = process.env.UI_OLDEST_PORT || '8879';

module.exports = {
  ...base,
  testDir: './apps',
  outputDir: './test-results-lab-oldest',
  use: { ...base.use, baseURL: `http://localhost:${port}`, app: 'lab' },
  webServer: {
    command: `jupyter lab --config jupyter_server_test_config.py --port ${port}`,
    url: `http://localhost:${port}/lab`,
    timeout: 120 * 1000,
    reuseExistingServer: !process.env.CI
  }
};
