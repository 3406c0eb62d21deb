// Bring the work home from a real VM, through the real CLI (run after a build: it runs from dist/):
// one instance for the file, whose workspace gets text, binary, renamed, deleted, mode and symlink
// changes; `pi-sandbox diff NAME > p.patch` applies with git apply, and `pi-sandbox apply --to`
// leaves a host copy of the created workspace equal to the guest's.
import { execFileSync, spawn } from "node:child_process";
import { mkdtemp, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { shellQuote } from "@pi-sandbox/config";
import { makeSandbox, teardown, type Sandbox } from "../src/testing.js";
import {
  CHANGES,
  INITIAL,
  NOT_IN_PATCH,
  READ_TREE_PY,
  readTree,
  sh,
  type TreeEntry,
} from "./support/workspace-trees.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const NAME = "dv";
const YAML = `profile: tiny
diskGiB: 4
setup:
  - |
${INITIAL.trim()
  .split("\n")
  .map((line) => `    ${line}`)
  .join("\n")}
`;

let sandbox: Sandbox;

/** Runs `pi-sandbox …args` in the sandbox's directory; stdout as bytes, so a patch arrives exactly. */
function cli(args: string[]): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: sandbox.dir, env: sandbox.env });
    const out: Buffer[] = [];
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => out.push(chunk));
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));
    child.stdin.end();
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout: Buffer.concat(out), stderr }));
  });
}

/** The guest workspace as a tree (what a patch carries), read in the guest. */
async function guestTree(): Promise<Record<string, TreeEntry>> {
  const run = await sandbox.call({
    action: "exec",
    name: NAME,
    cmd: `python3 -c ${shellQuote(READ_TREE_PY)} /workspace ${shellQuote(NOT_IN_PATCH.join(","))}`,
    timeoutMs: 60_000,
  });
  expect(run.exitCode).toBe(0);
  return JSON.parse(run.output as string) as Record<string, TreeEntry>;
}

/** A host copy of the workspace as the create left it. */
async function initialCopy(label: string): Promise<string> {
  const copy = await mkdtemp(join(sandbox.dir, `${label}-`));
  sh(copy, INITIAL);
  return copy;
}

beforeAll(async () => {
  sandbox = await makeSandbox("dv-");
  await sandbox.writeConfig(YAML);
  const created = await sandbox.call({ action: "create", name: NAME, config: "sandbox.yaml" });
  expect(created.state).toBe("running");
  const changed = await sandbox.call({ action: "exec", name: NAME, cmd: CHANGES, timeoutMs: 60_000 });
  expect(changed).toMatchObject({ exitCode: 0 });
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

test("pi-sandbox diff prints a patch git apply takes, and --stat summarises it", async () => {
  const stat = await cli(["diff", NAME, "--stat"]);
  expect({ code: stat.code, stderr: stat.stderr }).toEqual({ code: 0, stderr: "" });
  const summary = stat.stdout.toString("utf8");
  expect(summary).toMatch(/^R {2}old-name\.txt → new-name\.txt {2}\+1 -0$/m);
  expect(summary).toMatch(/^D {2}gone\.txt {2}\+0 -1$/m);
  expect(summary).toMatch(/^M {2}run\.sh {2}\+0 -0 {2}mode 100644 → 100755$/m);
  expect(summary).toMatch(/^A {2}image\.png {2}binary$/m);
  expect(summary).toMatch(/^A {2}link-to-a {2}\+1 -0 {2}→ src\/a\.ts$/m);
  expect(summary).toMatch(/^11 files changed, .* since its create$/m);

  const diff = await cli(["diff", NAME]);
  expect({ code: diff.code, stderr: diff.stderr }).toEqual({ code: 0, stderr: "" });
  const patch = join(sandbox.dir, "work.patch");
  await writeFile(patch, diff.stdout);
  const copy = await initialCopy("git-apply");
  execFileSync("git", ["apply", patch], { cwd: copy, env: { ...process.env, GIT_CEILING_DIRECTORIES: sandbox.dir } });
  expect(await readTree(copy)).toEqual(await guestTree());
});

test("pi-sandbox apply --to brings the workspace's changes into a host directory", async () => {
  const copy = await initialCopy("apply");
  const applied = await cli(["apply", NAME, "--to", copy]);
  expect({ code: applied.code, stderr: applied.stderr }).toEqual({ code: 0, stderr: "" });
  expect(applied.stdout.toString("utf8")).toMatch(/^applied dv's changes since its create to .* \(git apply\)$/m);
  expect(await readTree(copy)).toEqual(await guestTree());
});
