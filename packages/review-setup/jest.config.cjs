// Unit tests: no VM (the refresh against a fake guest, the model server, locks, snapshots).
// Real-VM suites (*.vm.test.ts) run with jest.vm.config.cjs.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "review-setup",
  testPathIgnorePatterns: ["/node_modules/", "\\.vm\\.test\\.ts$"],
  testTimeout: 120_000,
};
