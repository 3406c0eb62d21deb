// Unit tests: no VM (a real Pi process against a fake model, the SDK, the packed install).
// Real-VM suites (*.vm.test.ts) run with jest.vm.config.cjs.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "pi-extension",
  testPathIgnorePatterns: ["/node_modules/", "\\.vm\\.test\\.ts$"],
  // install.test.ts packs and installs the packages; Pi's own start takes seconds on a busy host.
  testTimeout: 300_000,
};
