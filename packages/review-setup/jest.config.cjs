module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "review-setup",
  // Real-VM suites (test/*.vm.test.ts) need a guest image; globalSetup builds or reuses it.
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  // Under TCG a create that downloads Node in setup takes minutes; npm ci and builds add more.
  testTimeout: 1_200_000,
};
