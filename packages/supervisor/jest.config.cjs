module.exports = { ...require("../../jest.preset.cjs"), displayName: "supervisor" };
