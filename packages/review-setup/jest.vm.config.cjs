// Real-VM suites (*.vm.test.ts): boot the guest test image under QEMU (TCG here: slow boots).
// The globalSetup builds or reuses the image and sets PI_SANDBOX_TEST_IMAGE. Only
// monorepo.vm.test.ts refreshes this repository itself; the others use a small fixture repository.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "review-setup-vm",
  testMatch: ["<rootDir>/test/**/*.vm.test.ts"],
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  // Under TCG the monorepo refresh (monorepo.vm.test.ts: npm ci and six tsc builds) takes 14-17 min
  // in CI; that one test has 30 min of its own.
  testTimeout: 1_200_000,
  maxWorkers: 1,
};
