// What `--scope` installs and builds in the guest: the whole workspace (full), or only what the Pi
// extension needs, its workspace dependencies built first (pi).
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { scopeCommands } from "../src/scope.js";

let root: string;
const files: string[] = [];

async function pkg(rel: string, body: Record<string, unknown>) {
  await mkdir(join(root, rel), { recursive: true });
  await writeFile(join(root, rel, "package.json"), JSON.stringify(body));
  files.push(rel === "." ? "package.json" : `${rel}/package.json`);
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "scope-"));
  await pkg(".", { name: "ws", workspaces: ["packages/*", "e2e"] });
  await pkg("packages/pi-extension", {
    name: "@x/pi-extension",
    scripts: { build: "tsc" },
    dependencies: { "@x/controller": "*" },
    devDependencies: { "@earendil-works/pi-coding-agent": "^1" },
  });
  await pkg("packages/controller", {
    name: "@x/controller",
    scripts: { build: "tsc" },
    dependencies: { "@x/vm": "*", "@x/config": "*", yaml: "^2" },
  });
  await pkg("packages/vm", { name: "@x/vm", scripts: { build: "tsc" }, dependencies: { "@x/config": "*" } });
  await pkg("packages/config", { name: "@x/config", scripts: { build: "tsc" } });
  await pkg("packages/types-only", { name: "@x/types-only" });
  await pkg("packages/unrelated", { name: "@x/unrelated", scripts: { build: "tsc" } });
  await pkg("e2e", { name: "e2e", dependencies: { "@x/pi-extension": "*" } });
  // Not a workspace: nested below a workspace.
  await pkg("packages/vm/fixtures/inner", { name: "@x/inner", scripts: { build: "x" } });
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

test("full: npm ci and the workspace's own build", async () => {
  expect(await scopeCommands("full", root, files)).toEqual({
    install: "npm ci --no-audit --no-fund --prefer-offline",
    build: "npm run build",
  });
});

test("pi: install for the extension's workspace; build its workspace dependencies first, nothing else", async () => {
  expect(await scopeCommands("pi", root, files)).toEqual({
    install: "npm ci --no-audit --no-fund --prefer-offline --workspace @x/pi-extension",
    build:
      "npm run build --workspace @x/config && npm run build --workspace @x/vm && " +
      "npm run build --workspace @x/controller && npm run build --workspace @x/pi-extension",
    workspaces: ["@x/config", "@x/vm", "@x/controller", "@x/pi-extension"],
  });
});

test("pi: a checkout without packages/pi-extension is refused with the fix", async () => {
  await expect(scopeCommands("pi", root, ["package.json", "packages/vm/package.json"])).rejects.toMatchObject({
    code: "REVIEW_SETUP_USAGE",
    message: "--scope pi needs the workspace packages/pi-extension in the checkout",
    hint: expect.stringContaining("--scope full"),
  });
});

test("pi on this repository: every workspace is built after the workspaces it depends on", async () => {
  const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
  const tracked = execFileSync("git", ["ls-files"], { cwd: repo, encoding: "utf8" }).trim().split("\n");
  const { workspaces = [] } = await scopeCommands("pi", repo, tracked);
  expect(workspaces.at(-1)).toBe("@pi-sandbox/pi-extension");
  expect(workspaces).toContain("@pi-sandbox/controller");
  expect(workspaces).not.toContain("@pi-sandbox/review-setup");
  const index = (name: string) => workspaces.indexOf(name);
  expect(index("@pi-sandbox/config")).toBeLessThan(index("@pi-sandbox/vm"));
  expect(index("@pi-sandbox/vm")).toBeLessThan(index("@pi-sandbox/controller"));
  expect(index("@pi-sandbox/controller")).toBeLessThan(index("@pi-sandbox/pi-extension"));
});
