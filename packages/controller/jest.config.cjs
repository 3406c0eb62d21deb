// Unit tests: no VM (the *.local.test.ts suites run the lifecycle over host processes). Real-VM
// suites (*.vm.test.ts) run with jest.vm.config.cjs.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "controller",
  testPathIgnorePatterns: ["/node_modules/", "\\.vm\\.test\\.ts$"],
  // The local lifecycle suites start real daemons, agents and previews: room for a busy CI host.
  testTimeout: 600_000,
};
