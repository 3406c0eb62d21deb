// Host tests start real processes (python3 agent, services, sleeps): give them room on 2 cores.
module.exports = {
  ...require("../../jest.preset.cjs"),
  displayName: "supervisor",
  testTimeout: 120_000,
  testPathIgnorePatterns: ["/node_modules/", "\\.vm\\.test\\.ts$"],
};
