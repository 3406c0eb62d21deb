// The seed walkthrough through the `pi-sandbox` command a person types: doctor, create with the
// preview, exec, write/read, logs and service status, stop (the preview goes away), list, start
// (same URL, files kept), a template with two instances, destroy. Each step runs the real CLI
// as a child process and reads its human output, as a user at a terminal would.
import { makeSandbox, qemuGone, SEED_YAML, teardown, type Sandbox } from "@pi-sandbox/controller/testing";
import { runCli } from "./support/cli-run.js";

let sandbox: Sandbox;

beforeAll(async () => {
  sandbox = await makeSandbox("psc-");
  await sandbox.writeConfig(SEED_YAML);
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
}, 300_000);

/** Runs `pi-sandbox args…` in the sandbox dir; `input` goes to stdin. */
const cli = (args: string[], input?: string) =>
  runCli(args, { cwd: sandbox.dir, env: sandbox.env, input, timeoutMs: 600_000 });

async function ok(args: string[], input?: string): Promise<string> {
  const run = await cli(args, input);
  if (run.code !== 0) throw new Error(`pi-sandbox ${args.join(" ")} exited ${run.code}:\n${run.stderr}`);
  return run.stdout;
}

async function fetchText(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(60_000) });
  return `${res.status} ${await res.text()}`;
}

test("doctor, create, preview, exec, files, logs, stop, start, templates and destroy from the command line", async () => {
  const doctor = await ok(["doctor", "-c", "sandbox.yaml"]);
  expect(doctor).toMatch(/qemu/i);

  const created = await ok(["create", "demo", "-c", "sandbox.yaml"]);
  expect(created).toMatch(/^state:\s+running$/m);
  const url = /^preview:\s+(http:\/\/127(?:\.\d{1,3}){3}:\d+\/)/m.exec(created)?.[1];
  expect(url).toBeDefined();
  expect(await fetchText(url!)).toBe("200 Hello from the guest\n");

  // Words after -- are an argv, like docker exec's; the CLI exits with the command's code.
  expect(await ok(["exec", "demo", "--", "python3", "-c", "print(6*7)"])).toMatch(/^42$/m);
  expect((await cli(["exec", "demo", "--", "sh", "-c", "exit 3"])).code).toBe(3);

  await ok(["write", "demo", "/workspace/note.txt"], "kept across stop\n");
  expect(await ok(["read", "demo", "/workspace/note.txt"])).toBe("kept across stop\n");
  expect(await ok(["services", "demo", "status"])).toMatch(/web/);
  expect(await ok(["logs", "demo", "web", "-n", "20"])).toMatch(/GET \/ HTTP/);

  expect(await ok(["stop", "demo"])).toMatch(/^state:\s+stopped$/m);
  await expect(fetch(url!)).rejects.toThrow();
  expect(await qemuGone(sandbox.home)).toEqual([]);
  expect(await ok(["list"])).toMatch(/^demo\s+stopped\b/m);

  const started = await ok(["start", "demo"]);
  expect(started).toMatch(/^state:\s+running$/m);
  expect(started).toContain(`preview:     ${url}`);
  expect(await fetchText(url!)).toBe("200 Hello from the guest\n");
  expect(await ok(["read", "demo", "/workspace/note.txt"])).toBe("kept across stop\n");

  // A typed error for a bad name, before anything touches the disk.
  const bad = await cli(["inspect", "Not_A_Name"]);
  expect(bad.code).toBe(1);
  expect(bad.stderr).toMatch(/^error CONTROLLER_INVALID_NAME: .*\nhint: .+/);
  const badJson = await cli(["inspect", "Not_A_Name", "--json"]);
  expect(JSON.parse(badJson.stderr).error.code).toBe("CONTROLLER_INVALID_NAME");

  // Templates: prepare once, two independent instances.
  expect(await ok(["prepare", "web-base", "-c", "sandbox.yaml"])).toMatch(/^state:\s+prepared$/m);
  expect(await ok(["list", "--templates"])).toMatch(/^web-base\s+prepared\b/m);
  // The instance starts from the prepared disk: setup's file is there without setup running again.
  expect(await ok(["create", "review-one", "-t", "web-base"])).toMatch(/^state:\s+running$/m);
  expect(await ok(["read", "review-one", "/workspace/index.html"])).toBe("Hello from the guest\n");
  expect(await cli(["read", "review-one", "/workspace/note.txt"])).toMatchObject({ code: 1 });
  expect(await ok(["stop", "review-one"])).toMatch(/^state:\s+stopped$/m);

  const refused = await cli(["destroy", "demo", "--confirm", "wrong"]);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toMatch(/^error CONTROLLER_CONFIRM_MISMATCH: /);
  await ok(["destroy", "demo", "--confirm", "demo"]);
  await ok(["destroy", "review-one", "--confirm", "review-one"]);
  await ok(["destroy", "web-base", "--confirm", "web-base", "--template"]);
  expect(await ok(["list"])).toBe("no instances\n");
  expect(await qemuGone(sandbox.home)).toEqual([]);
}, 900_000);
