// The whole story with a real Pi process and a real VM: the model reads help, creates the seed
// instance and gets a preview URL that serves the guest's page, a code-mode script drives the
// tool, bad input comes back with a hint, the user gets a working ssh command from /sandbox
// while the model is refused it, an interrupted call leaves its guest work running, and the
// instance outlives Pi.

import { spawnSync } from "node:child_process";
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { callAction, renderHelp } from "@pi-sandbox/controller/client";
import { SEED_YAML, testImage } from "@pi-sandbox/controller/testing";
import { startFakeOpenAI, type FakeOpenAI } from "./support/fake-openai.js";
import {
  FAKE_MODEL_ARGS,
  makePiHome,
  PACKAGE_DIR,
  PiRpc,
  resultText,
  runPi,
  toolEnds,
  type PiHome,
  type Json,
} from "./support/pi-harness.js";

let fake: FakeOpenAI;
let home: PiHome;
let previewUrl = "";

const call = (action: Record<string, unknown>) =>
  callAction(action, { env: home.env, cwd: home.workDir }) as Promise<Json>;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  home = await makePiHome(fake, "ppv-");
  await writeFile(join(home.workDir, "sandbox.yaml"), `version: 1\nimage: ${testImage()}\n${SEED_YAML}`);
});

afterAll(async () => {
  // The instance is shared by the tests; destroying it stops the VM and its daemon.
  await call({ action: "destroy", name: "demo", confirm: "demo" }).catch(() => undefined);
  await fake?.close();
  if (home) await rm(home.dir, { recursive: true, force: true });
});

async function fetchText(url: string): Promise<string> {
  const res = await fetch(url);
  return `${res.status} ${await res.text()}`;
}

test("help, create with a live preview, and a bad input in one Pi run; the instance outlives Pi", async () => {
  fake.script(
    { tool: "sandbox", args: { input: "{}" } },
    { tool: "sandbox", args: { input: '{"action":"create","name":"demo","config":"sandbox.yaml"}' } },
    { tool: "sandbox", args: { input: '{"action":"exec","name":"demo"' } },
  );
  const run = await runPi(home, [...FAKE_MODEL_ARGS, "-e", PACKAGE_DIR, "--mode", "json", "make me a sandbox"], {
    timeoutMs: 600_000,
  });
  expect(run.code).toBe(0);
  const [help, created, bad] = toolEnds(run.events);
  expect(help).toMatchObject({ toolName: "sandbox", isError: false });
  expect(resultText(help!)).toBe(renderHelp());

  expect(created!.isError).toBe(false);
  const result = JSON.parse(resultText(created!)) as Json;
  expect(result.state).toBe("running");
  expect(created!.result.details).toMatchObject({ action: "create", name: "demo", status: "ok", state: "running" });
  previewUrl = result.previews[0].url as string;
  expect(previewUrl).toMatch(/^http:\/\/127(?:\.\d{1,3}){3}:\d+\/$/);
  // Progress streamed while the VM booted and setup ran.
  const updates = run.events.filter((e) => e.type === "tool_execution_update" && e.toolCallId === created!.toolCallId);
  expect(updates.length).toBeGreaterThan(0);
  expect(updates.map((u) => u.partialResult.details.progress.at(-1).stage)).toEqual(expect.arrayContaining(["boot"]));

  expect(bad!.isError).toBe(true);
  expect(resultText(bad!)).toMatch(/^CONTROLLER_BAD_INPUT: input is not valid JSON.*\nHint: Send one JSON object/);

  // Pi has exited; the environment has not.
  expect((await call({ action: "inspect", name: "demo" })).state).toBe("running");
  expect(await fetchText(previewUrl)).toBe("200 Hello from the guest\n");
});

test("a code-mode script calls tools.sandbox with a bare JSON string", async () => {
  const code = [
    `const r = await tools.sandbox('{"action":"exec","name":"demo","cmd":"cat /workspace/index.html"}');`,
    "return `exit=${r.exitCode} out=${r.output.trim()}`;",
  ].join("\n");
  fake.script({ tool: "codemode", args: { code } });
  const run = await runPi(
    home,
    [...FAKE_MODEL_ARGS, "-e", PACKAGE_DIR, "--tools", "+codemode", "--mode", "json", "read the page"],
    { timeoutMs: 180_000 },
  );
  expect(run.code).toBe(0);
  const end = toolEnds(run.events).find((e) => e.toolName === "codemode");
  expect(end?.isError).toBe(false);
  expect(resultText(end!)).toContain("exit=0 out=Hello from the guest");
});

test("/sandbox gives the user a working ssh command, the model is refused, and an interrupted exec keeps running", async () => {
  const rpc = PiRpc.start(home, ["-e", PACKAGE_DIR]);
  let sshCommand = "";
  try {
    rpc.send({ id: "s", type: "prompt", message: "/sandbox demo" });
    const note = await rpc.waitFor((e) => e.type === "extension_ui_request" && e.method === "notify", 180_000);
    expect(note.notifyType).toBe("info");
    sshCommand = (note.message as string).split("\n").find((l) => l.startsWith("ssh ")) ?? "";
    expect(sshCommand).toMatch(/^ssh -p \d+ .* root@127\.0\.0\.1$/);
    expect(ssh(sshCommand, "echo ok")).toBe("ok");

    // The model asks for the terminal and is refused with a pointer to /sandbox.
    fake.script({ tool: "sandbox", args: { input: '{"action":"shell","name":"demo"}' } });
    rpc.send({ id: "m", type: "prompt", message: "open a shell" });
    const refused = await rpc.waitFor((e) => e.type === "tool_execution_end", 60_000);
    expect(refused.isError).toBe(true);
    expect(resultText(refused)).toMatch(/^CONTROLLER_USER_ONLY: .*\nHint: .*\/sandbox demo/s);
    await rpc.waitFor((e) => e.type === "agent_settled");

    // An exec that outlasts the user's patience: once it runs in the guest, Esc (RPC abort) ends
    // the wait, not the command.
    const slow = {
      action: "exec",
      name: "demo",
      cmd: "touch /tmp/began; sleep 8; echo finished > /tmp/late.txt",
      timeoutMs: 60_000,
    };
    fake.script({ tool: "sandbox", args: { input: JSON.stringify(slow) } });
    rpc.send({ id: "x", type: "prompt", message: "run the slow thing" });
    const started = await rpc.waitFor(
      (e) => e.type === "tool_execution_start" && e.args?.input === JSON.stringify(slow),
      60_000,
    );
    await until(async () => (await call({ action: "exec", name: "demo", cmd: "test -e /tmp/began" })).exitCode === 0);
    rpc.send({ id: "a", type: "abort" });
    const ended = await rpc.waitFor(
      (e) => e.type === "tool_execution_end" && e.toolCallId === started.toolCallId,
      60_000,
    );
    expect(ended.isError).toBe(true);
    expect(resultText(ended)).toContain("Stopped waiting for exec of demo because the user interrupted.");
    expect(resultText(ended)).toContain("A command that had started keeps running in the guest.");
    expect(resultText(ended)).toContain('{"action":"inspect","name":"demo"}');
    expect(ended.durationMs).toBeLessThan(8_000);
    await rpc.waitFor((e) => e.type === "agent_settled" && e.aborted === true);
  } finally {
    expect(await rpc.close()).toBe(0);
  }
  // Quitting Pi stopped nothing: the instance runs, the command finished, the terminal still works.
  expect((await call({ action: "inspect", name: "demo" })).state).toBe("running");
  const late = await call({
    action: "exec",
    name: "demo",
    cmd: "for i in $(seq 30); do [ -e /tmp/late.txt ] && break; sleep 1; done; cat /tmp/late.txt",
    timeoutMs: 45_000,
  });
  expect(late).toMatchObject({ running: false, exitCode: 0, output: "finished\n" });
  expect(ssh(sshCommand, "echo still")).toBe("still");
  expect(await fetchText(previewUrl)).toBe("200 Hello from the guest\n");
});

test("the rest of the seed walkthrough through Pi: stop, start, a template with an instance; destroy is the user's", async () => {
  const input = (action: Record<string, unknown>) => ({ tool: "sandbox", args: { input: JSON.stringify(action) } });
  fake.script(
    input({ action: "stop", name: "demo" }),
    input({ action: "start", name: "demo" }),
    input({ action: "prepare", name: "web-base", config: "sandbox.yaml" }),
    input({ action: "create", name: "review-one", template: "web-base" }),
    input({ action: "destroy", name: "review-one", confirm: "review-one" }),
    input({ action: "destroy", name: "web-base", kind: "templates", confirm: "web-base" }),
  );
  const run = await runPi(home, [...FAKE_MODEL_ARGS, "-e", PACKAGE_DIR, "--mode", "json", "walk the README"], {
    timeoutMs: 900_000,
  });
  expect(run.code).toBe(0);
  const [stopped, started, prepared, created, refused, refusedTemplate] = toolEnds(run.events);
  const ok = (end: Json | undefined) => {
    expect(end?.isError).toBe(false);
    return JSON.parse(resultText(end!)) as Json;
  };
  expect(ok(stopped).state).toBe("stopped");
  // Reopened from the checkpoint, on the same preview URL.
  const reopened = ok(started);
  expect(reopened.state).toBe("running");
  expect(reopened.previews[0].url).toBe(previewUrl);
  expect(await fetchText(previewUrl)).toBe("200 Hello from the guest\n");
  expect(ok(prepared).state).toBe("prepared");
  const fromTemplate = ok(created);
  expect(fromTemplate).toMatchObject({ state: "running", template: "web-base" });
  // Its own preview port (it is destroyed by the end of the run, so not fetched here).
  expect(fromTemplate.previews[0].url).toMatch(/^http:\/\/127(?:\.\d{1,3}){3}:\d+\/$/);
  expect(fromTemplate.previews[0].url).not.toBe(previewUrl);
  // Destroy cannot be undone: without a UI to ask, the model is given the user's command instead.
  expect(resultText(refused!)).toMatch(
    /^CONTROLLER_CONFIRMATION_REQUIRED: .*\ninstance review-one \(cannot be undone\)\nHint: .*: pi-sandbox destroy review-one$/s,
  );
  expect(resultText(refusedTemplate!)).toMatch(/Hint: .*: pi-sandbox destroy web-base --template$/s);
  await expect(call({ action: "destroy", name: "review-one", confirm: "demo" })).rejects.toMatchObject({
    code: "CONTROLLER_CONFIRM_MISMATCH",
  });
  expect((await call({ action: "destroy", name: "review-one", confirm: "review-one" })).destroyed).toBe("review-one");
  const template = { action: "destroy", name: "web-base", kind: "templates", confirm: "web-base" };
  expect((await call(template)).destroyed).toBe("web-base");
  expect((await call({ action: "list" })).instances.map((v: Json) => v.name)).toEqual(["demo"]);
});

/** Polls until `check` holds (at most 30 s). */
async function until(check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met within 30 s");
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Runs a command through the printed ssh command, non-interactively. */
function ssh(command: string, remote: string): string {
  const args = command.split(" ").slice(1);
  const out = spawnSync("ssh", ["-o", "BatchMode=yes", "-o", "ConnectTimeout=30", ...args, remote], {
    encoding: "utf8",
    timeout: 60_000,
  });
  if (out.status !== 0) throw new Error(`ssh failed (${out.status}): ${out.stderr}`);
  return out.stdout.trim();
}
