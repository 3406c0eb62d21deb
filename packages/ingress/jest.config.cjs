// Host tests; the real-VM suites (*.vm.test.ts) run with jest.vm.config.cjs.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "ingress",
  testPathIgnorePatterns: ["/node_modules/", "\\.vm\\.test\\.ts$"],
  // long.test.ts holds a 60 s first response and a 30 s SSE stream.
  testTimeout: 90_000,
};
