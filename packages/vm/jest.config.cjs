// Unit tests (no VM). Real-VM suites (*.vm.test.ts) run with jest.vm.config.cjs.
const preset = require("../../jest.preset.cjs");
module.exports = { ...preset, displayName: "vm", testPathIgnorePatterns: ["/node_modules/", "\\.vm\\.test\\.ts$"] };
