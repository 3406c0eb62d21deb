// Real-VM end-to-end suites. The globalSetup builds or reuses the guest test image and sets
// PI_SANDBOX_TEST_IMAGE; tests boot it under TCG, one file at a time.
const preset = require("../jest.preset.cjs");

module.exports = {
  ...preset,
  displayName: "e2e",
  globalSetup: require.resolve("../jest.test-image.cjs"),
  testTimeout: 600_000,
  maxWorkers: 1,
};
