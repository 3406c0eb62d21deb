// Real-VM suites (*.vm.test.ts): boot the guest test image under QEMU (TCG here: slow boots).
// The globalSetup builds or reuses the image and sets PI_SANDBOX_TEST_IMAGE.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "controller-vm",
  testMatch: ["<rootDir>/test/**/*.vm.test.ts"],
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  testTimeout: 600_000,
  maxWorkers: 1,
};
