// Unit tests, all on the host (no image is built): recipes, the host-tool and root checks, and the
// image store in a temporary cache.
module.exports = { ...require("../../jest.preset.cjs"), displayName: "image" };
