module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "review-setup",
  // Real-VM suites (test/*.vm.test.ts) need a guest image; globalSetup builds or reuses it.
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  // Under TCG the monorepo refresh (monorepo.vm.test.ts: npm ci and six tsc builds) takes 14-17 min
  // in CI; that one test has 30 min of its own.
  testTimeout: 1_200_000,
};
