// Jest globalSetup for real-VM suites: makes sure a guest test image exists and exposes its
// directory as PI_SANDBOX_TEST_IMAGE. Use it from a package's jest config:
//   globalSetup: require.resolve("../../jest.test-image.cjs")
// When PI_SANDBOX_TEST_IMAGE is already set it is checked and used as is. Otherwise this runs
// `npm run -s test-image` at the workspace root (progress shows on stderr; a cold build takes a
// few minutes, a warm one seconds) and takes the last line of its stdout. Any failure throws:
// real-VM tests never skip for want of an image.
const { spawnSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const REQUIRED = ["manifest.json", "vmlinuz-virt", "initramfs.cpio.lz4", "rootfs.ext4"];

function checkAssets(dir, origin) {
  if (!path.isAbsolute(dir)) {
    throw new Error(`${origin} gave "${dir}", which is not an absolute path to a guest assets directory`);
  }
  const missing = REQUIRED.filter((name) => !fs.existsSync(path.join(dir, name)));
  if (missing.length > 0) {
    throw new Error(
      `${origin} points at ${dir}, which lacks ${missing.join(", ")}; rebuild with "npm run -s test-image"`,
    );
  }
  return dir;
}

module.exports = async function testImageGlobalSetup() {
  const preset = process.env.PI_SANDBOX_TEST_IMAGE;
  if (preset) {
    checkAssets(preset, "PI_SANDBOX_TEST_IMAGE");
    return;
  }
  const root = __dirname;
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const result = spawnSync(npm, ["run", "-s", "test-image"], {
    cwd: root,
    stdio: ["ignore", "pipe", "inherit"],
    encoding: "utf8",
    maxBuffer: 16 * 1024 * 1024,
  });
  if (result.error) {
    throw new Error(`could not run "npm run -s test-image" in ${root}: ${result.error.message}`);
  }
  if (result.status !== 0) {
    throw new Error(
      `"npm run -s test-image" failed (${result.signal ?? `exit ${result.status}`}); its stderr above says why. ` +
        "Fix that, or set PI_SANDBOX_TEST_IMAGE to an existing assets directory.",
    );
  }
  const lines = result.stdout.split("\n").filter((line) => line.trim() !== "");
  const dir = lines[lines.length - 1]?.trim();
  if (!dir) throw new Error('"npm run -s test-image" printed no assets directory on stdout');
  process.env.PI_SANDBOX_TEST_IMAGE = checkAssets(dir, '"npm run -s test-image"');
};
