// The state root and what is read from it without a daemon: a private root (a group-readable one
// refused with the chmod fix), names and socket paths, list, inspect and logs of stopped instances.
import { chmod, mkdtemp, readdir, readFile, rm, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { callAction, ControllerError, StateLayout } from "../src/client/index.js";
import { writeJsonAtomic } from "@pi-sandbox/config";
import { writeRecord, writeStatus } from "../src/state/records.js";

let root: string;
let env: NodeJS.ProcessEnv;

beforeEach(async () => {
  const base = await mkdtemp(join(tmpdir(), "ctl-"));
  root = join(base, "state");
  env = { ...process.env, PI_SANDBOX_HOME: root };
});

afterEach(async () => {
  await rm(join(root, ".."), { recursive: true, force: true });
});

const config = parseConfig(
  "version: 1\nservices:\n  web:\n    command: python3 -m http.server $PORT\n    preview: true\n",
);

async function seed(name: string, state: string, daemonPid?: number) {
  const layout = new StateLayout(root);
  await layout.ensurePrivate();
  await mkdir(layout.entryDir("instances", name), { recursive: true });
  await writeRecord(layout, { kind: "instances", name, createdAt: "2026-01-01T00:00:00.000Z", config });
  await writeStatus(layout, "instances", name, {
    state: state as "running",
    updatedAt: "2026-01-01T00:00:00.000Z",
    daemonPid,
  });
  return layout;
}

describe("state root", () => {
  test("is created private", async () => {
    await new StateLayout(root).ensurePrivate();
    expect(await readdir(root)).toEqual(expect.arrayContaining(["instances", "templates"]));
  });

  test("a group-readable root is refused with the chmod fix", async () => {
    await mkdir(root, { recursive: true });
    await chmod(root, 0o755);
    await expect(new StateLayout(root).ensurePrivate()).rejects.toMatchObject({
      code: "CONTROLLER_STATE_INSECURE",
      hint: `Run: chmod 700 ${root}`,
    });
  });

  test.each(["../x", "A", "a".repeat(41), "démo", "", "-x", "x/y"])(
    "bad name %p is refused before touching disk",
    async (name) => {
      await expect(callAction({ action: "inspect", name }, { env })).rejects.toMatchObject({
        code: "CONTROLLER_INVALID_NAME",
      });
      await expect(callAction({ action: "stop", name }, { env })).rejects.toMatchObject({
        code: "CONTROLLER_INVALID_NAME",
      });
      const entries = await readdir(join(root, "instances")).catch(() => []);
      expect(entries).toEqual([]);
    },
  );

  test("socket paths stay under the Unix limit", () => {
    const layout = new StateLayout(join("/tmp", "x".repeat(120)));
    expect(Buffer.byteLength(layout.socketPath("instances", "a".repeat(40)))).toBeLessThanOrEqual(100);
    const short = new StateLayout("/tmp/s");
    expect(short.socketPath("instances", "demo")).toBe("/tmp/s/instances/demo/daemon.sock");
  });

  test("atomic JSON writes leave no temp files and replace whole", async () => {
    await mkdir(root, { recursive: true });
    const file = join(root, "x.json");
    await writeJsonAtomic(file, { a: 1 });
    await writeJsonAtomic(file, { a: 2 });
    expect(JSON.parse(await readFile(file, "utf8"))).toEqual({ a: 2 });
    expect(await readdir(root)).toEqual(["x.json"]);
  });
});

describe("list and inspect without a daemon", () => {
  test("a running status whose daemon is gone reads interrupted, with a recovery hint", async () => {
    await seed("demo", "running", 999_999);
    const view = (await callAction({ action: "inspect", name: "demo" }, { env })) as {
      state: string;
      hint: string;
      previews: unknown[];
    };
    expect(view.state).toBe("interrupted");
    expect(view.hint).toMatch(/"action":"start"/);
    expect(view.previews).toEqual([]);
  });

  test("a stopped instance reads stopped; list shows it with its resources", async () => {
    await seed("demo", "stopped");
    await seed("other", "starting");
    const result = (await callAction('{"action":"list"}', { env })) as {
      instances: { name: string; state: string; resources: unknown }[];
    };
    expect(result.instances.map((v) => [v.name, v.state])).toEqual([
      ["demo", "stopped"],
      ["other", "interrupted"],
    ]);
    expect(result.instances[0]!.resources).toEqual({ cpus: 2, memoryGiB: 4 });
  });

  test("inspect of a missing instance is CONTROLLER_NOT_FOUND", async () => {
    await expect(callAction({ action: "inspect", name: "ghost" }, { env })).rejects.toBeInstanceOf(ControllerError);
    await expect(callAction({ action: "inspect", name: "ghost" }, { env })).rejects.toMatchObject({
      code: "CONTROLLER_NOT_FOUND",
    });
  });

  test("actions that need a daemon say the instance is not running", async () => {
    await seed("demo", "stopped");
    await expect(callAction({ action: "exec", name: "demo", cmd: "true" }, { env })).rejects.toMatchObject({
      code: "CONTROLLER_NOT_RUNNING",
      hint: expect.stringMatching(/"action":"start","name":"demo"/),
    });
  });

  test("the model is refused the terminal action", async () => {
    await expect(callAction({ action: "shell", name: "demo" }, { env, caller: "model" })).rejects.toMatchObject({
      code: "CONTROLLER_USER_ONLY",
      hint: expect.stringMatching(/\/sandbox demo/),
    });
  });

  test("controller logs are read from the state dir", async () => {
    const layout = await seed("demo", "stopped");
    await writeFile(layout.logFile("instances", "demo"), "one\ntwo\nthree\n");
    const result = (await callAction({ action: "logs", name: "demo", lines: 2 }, { env })) as { lines: string[] };
    expect(result.lines).toEqual(["two", "three"]);
  });
});
