// Real-VM suites (test/*.vm.test.ts): boot the guest test image under whatever accelerator the
// host offers (TCG on CI). The globalSetup builds or reuses the image and sets PI_SANDBOX_TEST_IMAGE.
const preset = require("../../jest.preset.cjs");
module.exports = {
  ...preset,
  displayName: "vm (real VMs)",
  testMatch: ["<rootDir>/test/**/*.vm.test.ts"],
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  testTimeout: 900_000,
  maxWorkers: 1,
};
