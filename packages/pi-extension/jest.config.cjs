module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "pi-extension",
  // Real-VM suites (test/*.vm.test.ts) need a guest image; globalSetup builds or reuses it.
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  // Real-VM tests boot under TCG here; a create takes about a minute, more when the machine is busy.
  testTimeout: 900_000,
};
