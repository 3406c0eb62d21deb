module.exports = { ...require("../../jest.preset.cjs"), displayName: "review-setup" };
