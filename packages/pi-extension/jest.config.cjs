module.exports = { ...require("../../jest.preset.cjs"), displayName: "pi-extension" };
