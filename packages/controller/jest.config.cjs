module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "controller",
  globalSetup: require.resolve("../../jest.test-image.cjs"),
  testTimeout: 600_000,
};
