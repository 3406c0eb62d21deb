// Shared jest setup for every package: ESM TypeScript compiled by SWC, sources of sibling
// packages resolved through the "@pi-sandbox/source" export condition (no build needed to test).
/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: require.resolve("./jest.environment.cjs"),
  testEnvironmentOptions: { customExportConditions: ["@pi-sandbox/source", "node", "import", "default"] },
  extensionsToTreatAsEsm: [".ts"],
  moduleFileExtensions: ["ts", "js", "mjs", "cjs", "json"],
  transform: {
    "^.+\\.ts$": [
      "@swc/jest",
      {
        jsc: { parser: { syntax: "typescript" }, target: "es2023" },
        module: { type: "es6" },
        sourceMaps: "inline",
      },
    ],
  },
  moduleNameMapper: { "^(\\.{1,2}/.*)\\.js$": "$1" },
  testMatch: ["<rootDir>/test/**/*.test.ts"],
  testTimeout: 30_000,
  // A handle a failed test left open (a socket, a child's pipe) must not keep a finished run alive:
  // once every file has reported, Jest exits. CI once printed nothing more after its last suite for
  // 50 min, until its own limit ended the run.
  forceExit: true,
};
