// A command through a context opens its connection before the CLI has loaded (remote/early-connect.ts):
// only for commands whose call goes over it, never for help, a session or this machine; the call
// takes that very connection (one ssh session, not two), and a connection that failed early is the
// call's error, not a second attempt. A master is started first, from the terminal's process group
// (where ssh may ask for a passphrase); the session runs in a group of its own, so a Ctrl-C at the
// terminal does not end it before the CLI has sent an exec's kill through it. The other machine here is a small script standing in for
// ssh and `pi-sandbox system dial-stdio`: it logs how it was run and answers the hello and calls.
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "../src/client/index.js";
import { connectEarly } from "../src/remote/early-connect.js";
import { controllerVersion } from "../src/remote/protocol.js";
import { ensureControlDir } from "../src/remote/ssh.js";
import { addContext } from "../src/state/contexts.js";
import { contextTestEnv } from "./support/context-env.js";

let base: string;
let env: NodeJS.ProcessEnv;

/** A far side that answers the hello with `version` and each call with its action's name. */
const FAR = (version: string) => `
const lines = require("node:readline").createInterface({ input: process.stdin });
const say = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
lines.on("line", (line) => {
  const m = JSON.parse(line);
  if (m.type === "hello") say({ type: "hello", protocol: 1, version: ${JSON.stringify(version)} });
  else if (m.type === "call") say({ id: m.id, type: "result", result: { instances: [], ran: m.action.action } });
});`;

/**
 * An ssh that logs its arguments and process group; `-O check` finds no master; the master
 * (`-N -f`) starts, or fails as an unreachable host does; a session runs `far` (a script).
 */
async function fakeSsh(far: string | undefined): Promise<void> {
  await writeFile(join(base, "far.cjs"), far ?? "");
  const master = far ? "exit 0" : 'echo "ssh: connect to host far.example port 22: No route to host" >&2; exit 255';
  await writeFile(
    join(base, "ssh"),
    [
      "#!/bin/sh",
      `echo "$* pgid=$(ps -o pgid= -p $$ | tr -d ' ')" >> ${join(base, "ssh.log")}`,
      `case "$*" in *"-O check"*) exit 255;; *"-N -f"*) ${master};; esac`,
      `exec ${JSON.stringify(process.execPath)} ${join(base, "far.cjs")}`,
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
}

const log = async () => (await readFile(join(base, "ssh.log"), "utf8").catch(() => "")).split("\n");

const sessions = async () => (await log()).filter((line) => line.includes("dial-stdio"));

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "early-"));
  env = await contextTestEnv(base);
  // Connections stay open for the process (the tests share one): this one's own.
  await addContext("gone", "ssh://me@far.example", env);
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

test("help, sessions, copies and this machine open nothing early", async () => {
  await fakeSsh(FAR(controllerVersion()));
  for (const argv of [
    ["ls", "--help", "--context", "far"],
    ["exec", "-it", "demo", "--context", "far", "--", "bash"],
    ["shell", "demo", "--context", "far"],
    ["cp", "a", "demo:/b", "--context", "far"],
    ["ls"],
    ["ls", "--context", "local"],
    ["create", "demo", "--context", "nowhere"],
  ])
    await connectEarly(argv, env);
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect(await readFile(join(base, "ssh.log"), "utf8").catch(() => "")).toBe("");
});

test("the call takes the connection opened early: one ssh session for both", async () => {
  await fakeSsh(FAR(controllerVersion()));
  // The control directory is there already (the check and the spawn then wait for nothing).
  await ensureControlDir(env);
  await connectEarly(["ls", "--context", "far"], env);
  await connectEarly(["ls", "--context=far"], env);
  const listed = await callAction({ action: "list" }, { env, context: "far" });
  expect(listed).toEqual({ instances: [], ran: "list" });
  // No master ran: it was started first, from this process group (ssh may ask at its terminal).
  const ours = execFileSync("ps", ["-o", "pgid=", "-p", String(process.pid)], { encoding: "utf8" }).trim();
  const lines = await log();
  expect(lines[0]).toMatch(/-O check -- far\.example pgid=/);
  expect(lines[1]).toMatch(new RegExp(`-N -f -- far\\.example pgid=${ours}$`));
  // The session in a process group of its own: a Ctrl-C at the terminal reaches the CLI (which
  // sends the exec's kill through this session), not this ssh, which would end at once.
  expect(await sessions()).toHaveLength(1);
  expect((await sessions())[0]).toMatch(/-T -- far\.example pi-sandbox system dial-stdio pgid=(\d+)$/);
  expect((await sessions())[0]).not.toMatch(new RegExp(`pgid=${ours}$`));
});

test("a connection that failed early is the call's error, not tried twice", async () => {
  await fakeSsh(undefined);
  env.PI_SANDBOX_CONTEXT = "gone";
  await connectEarly(["create", "demo"], env);
  await expect(callAction({ action: "list" }, { env })).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_UNREACHABLE",
    message: expect.stringContaining("No route to host"),
  });
  expect((await log()).filter((line) => line.includes("-N -f"))).toHaveLength(1);
  expect(await sessions()).toEqual([]);
});
