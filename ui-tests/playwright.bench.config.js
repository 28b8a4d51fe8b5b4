/**
 * The browser benchmark (not part of CI: `scripts/bench-browser.sh` runs it).
 * Same Chromium and server as the Galata tests, its own test folder.
 */
const base = require('./playwright.config');

module.exports = {
  ...base,
  testDir: './bench',
  testMatch: '**/*.bench.ts',
  timeout: 300000,
  retries: 0,
  reporter: [['list']],
  use: { ...base.use, trace: 'off' }
};
