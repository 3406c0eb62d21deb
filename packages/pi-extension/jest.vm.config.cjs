// Real-VM suites (*.vm.test.ts): boot the guest test image under QEMU (TCG here: slow boots).
// The globalSetup builds or reuses the image and sets PI_SANDBOX_TEST_IMAGE.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "pi-extension-vm",
  testMatch: ["<rootDir>/test/**/*.vm.test.ts"],
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  // A create takes about a minute under TCG, more when the machine is busy.
  testTimeout: 900_000,
  maxWorkers: 1,
};
