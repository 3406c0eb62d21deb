// One Node floor per role, stated once (package.json "piSandbox.nodeFloor"): the CLI and daemon
// need Gondolin's, what Pi loads needs Pi's. Below the floor the command prints one line, not a
// stack trace; that is checked with the distribution's own older Node at /usr/bin/node.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { NODE_FLOORS, isOlderNode } from "../src/node-floor.js";

const OLD_NODE = "/usr/bin/node";
const bin = fileURLToPath(new URL("../bin/pi-sandbox.js", import.meta.url));
const require = createRequire(import.meta.url);

/** `engines.node` of an installed package (ours export ./package.json; Gondolin and Pi are found by path). */
function enginesOf(pkg: string): string {
  const file = pkg.startsWith("@pi-sandbox/")
    ? require.resolve(`${pkg}/package.json`)
    : fileURLToPath(new URL(`../../../node_modules/${pkg}/package.json`, import.meta.url));
  return (JSON.parse(readFileSync(file, "utf8")) as { engines: { node: string } }).engines.node;
}

test("the CLI floor is Gondolin's own and the Pi floor is Pi's", () => {
  expect(`>=${NODE_FLOORS.cli}`).toBe(enginesOf("@earendil-works/gondolin"));
  expect(`>=${NODE_FLOORS.pi}`).toBe(enginesOf("@earendil-works/pi-coding-agent"));
});

test.each([
  ["@pi-sandbox/vm", "cli"],
  ["@pi-sandbox/supervisor", "cli"],
  ["@pi-sandbox/ingress", "cli"],
  ["@pi-sandbox/image", "cli"],
  ["@pi-sandbox/config", "pi"],
  ["@pi-sandbox/controller", "pi"],
  ["@pi-sandbox/pi-extension", "pi"],
  ["@pi-sandbox/review-setup", "pi"],
] as const)("%s declares the %s floor in engines", (pkg, role) => {
  expect(enginesOf(pkg)).toBe(`>=${NODE_FLOORS[role]}`);
});

test("versions compare by major, minor and patch", () => {
  expect(isOlderNode("v23.5.9", "23.6.0")).toBe(true);
  expect(isOlderNode("23.6.0", "23.6.0")).toBe(false);
  expect(isOlderNode("v24.0.0", "23.6.0")).toBe(false);
  expect(isOlderNode("v20.20.2", "23.6.0")).toBe(true);
});

test("on a Node below the floor, pi-sandbox prints one line naming both versions and how to upgrade", () => {
  if (!existsSync(OLD_NODE)) {
    throw new Error(
      `this test runs the CLI on the system's older Node at ${OLD_NODE}, which is missing: install it (apt-get install nodejs; scripts/install-system-deps.sh does)`,
    );
  }
  const oldVersion = execFileSync(OLD_NODE, ["-p", "process.versions.node"], { encoding: "utf8" }).trim();
  if (!isOlderNode(oldVersion, NODE_FLOORS.cli)) {
    throw new Error(
      `${OLD_NODE} is Node ${oldVersion}, not below the CLI floor ${NODE_FLOORS.cli}: this test needs an older one`,
    );
  }
  const run = spawnSync(OLD_NODE, [bin, "list"], { encoding: "utf8", env: { ...process.env, NODE_OPTIONS: "" } });
  expect(run.status).toBe(1);
  expect(run.stdout).toBe("");
  const lines = run.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toContain(`needs Node.js ${NODE_FLOORS.cli} or newer`);
  expect(lines[0]).toContain(`is Node.js ${oldVersion}`);
  expect(lines[0]).toContain("https://nodejs.org");
  expect(run.stderr).not.toMatch(/SyntaxError|\n\s+at /);
});
