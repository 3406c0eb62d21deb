// Unit tests, all on the host (no VM): sandbox.yaml parsing and rendering, its JSON Schema, and
// the errors, names and text helpers every package shares.
module.exports = { ...require("../../jest.preset.cjs"), displayName: "config" };
