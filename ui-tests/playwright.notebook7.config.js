/**
 * The panel in Jupyter Notebook 7 (issue #26): the same Chromium and server settings as
 * the Galata tests, a Notebook 7 server (`jupyter notebook`), its own test folder.
 */
const base = require('./playwright.config');

const port = process.env.UI_NB7_PORT || '8878';

module.exports = {
  ...base,
  testDir: './apps',
  // its own folder: a run clears its output folder, and Galata's screenshots stay
  outputDir: './test-results-notebook7',
  use: { ...base.use, baseURL: `http://localhost:${port}`, app: 'notebook7' },
  webServer: {
    command: `jupyter notebook --config jupyter_server_test_config.py --port ${port}`,
    url: `http://localhost:${port}/tree`,
    timeout: 120 * 1000,
    reuseExistingServer: !process.env.CI
  }
};
