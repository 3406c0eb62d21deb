// Shared jest setup for every package: ESM TypeScript compiled by SWC, sources of sibling
// packages resolved through the "@pi-sandbox/source" export condition (no build needed to test).
/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: "node",
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
};
