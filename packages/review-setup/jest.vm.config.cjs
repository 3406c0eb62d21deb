// Real-VM suites (*.vm.test.ts): boot the guest test image under QEMU (TCG here: slow boots).
// The globalSetup builds or reuses the image and sets PI_SANDBOX_TEST_IMAGE. Only
// monorepo.vm.test.ts refreshes this repository itself; the others use a small fixture repository.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "review-setup-vm",
  testMatch: ["<rootDir>/test/**/*.vm.test.ts"],
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  // monorepo.vm.test.ts (the refresh of this whole repository) runs only with
  // PI_SANDBOX_REFRESH_TEST=1 (`npm run test:refresh`): under TCG on CI's 2 cores its install and
  // seven tsc builds took 48 min, more than half of CI's limit beside every other suite.
  testPathIgnorePatterns: process.env.PI_SANDBOX_REFRESH_TEST === "1" ? [] : ["/monorepo\\.vm\\.test\\.ts$"],
  testTimeout: 1_200_000,
  maxWorkers: 1,
};
