// The codes a client meets are the union's: a lower package's coded error keeps its code through
// the daemon and the socket; anything else (a Node system error) arrives as CONTROLLER_INTERNAL,
// its own code kept in details.cause. Over a real daemon, in-process on the local runtime.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { VmError } from "@pi-sandbox/vm";
import { callAction } from "../src/client/index.js";
import { StateLayout } from "../src/state/layout.js";
import { createLocalRuntime, type LocalRuntime } from "../src/testing.js";
import { inProcessDaemons, type InProcessDaemons } from "./support/in-process-daemon.js";

let dir: string;
let project: string;
let env: NodeJS.ProcessEnv;
let layout: StateLayout;
let runtime: LocalRuntime;
let daemons: InProcessDaemons;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-codes-"));
  project = join(dir, "project");
  await mkdir(project, { recursive: true });
  await writeFile(join(project, "sandbox.yaml"), "version: 1\nprofile: tiny\ndiskGiB: 4\n");
  env = { ...process.env, PI_SANDBOX_HOME: join(dir, "st") };
  layout = new StateLayout(join(dir, "st"));
  daemons = inProcessDaemons(layout);
  await layout.ensurePrivate();
  runtime = createLocalRuntime();
});

afterAll(async () => {
  await daemons.exited();
  for (const vm of [...runtime.live]) await vm.close();
  await rm(dir, { recursive: true, force: true });
});

/** Creates `name` through the client and a daemon of its own whose boot fails with `error`. */
async function createFailingWith(name: string, error: Error): Promise<unknown> {
  runtime.hooks.beforeBoot = () => {
    throw error;
  };
  await daemons.start(name, runtime);
  return callAction({ action: "create", name, config: "sandbox.yaml" }, { env, cwd: project });
}

test("a daemon-side ENOENT reaches the client as CONTROLLER_INTERNAL with its code in details.cause", async () => {
  const enoent = Object.assign(new Error("ENOENT: no such file or directory, open '/nowhere/kernel'"), {
    code: "ENOENT",
    errno: -2,
  });
  await expect(createFailingWith("enoent", enoent)).rejects.toMatchObject({
    name: "ControllerError",
    code: "CONTROLLER_INTERNAL",
    message: expect.stringContaining("no such file or directory"),
    hint: expect.stringContaining("controller log"),
    details: expect.objectContaining({ cause: "ENOENT" }),
  });
});

test("a VmError keeps its code, hint and details on the way to the client", async () => {
  const busy = new VmError("VM_DISK_BUSY", "the disk is held by pid 4242", {
    hint: "stop the other VM first",
    details: { pid: 4242 },
  });
  await expect(createFailingWith("busy", busy)).rejects.toMatchObject({
    name: "ControllerError",
    code: "VM_DISK_BUSY",
    message: "the disk is held by pid 4242",
    hint: expect.stringContaining("stop the other VM first"),
    details: expect.objectContaining({ pid: 4242 }),
  });
});
