// Real-VM suites (*.vm.test.ts): boot the guest test image under QEMU (TCG here: slow boots).
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "ingress-vm",
  testMatch: ["<rootDir>/test/**/*.vm.test.ts"],
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  testTimeout: 300_000,
  maxWorkers: 1,
};
