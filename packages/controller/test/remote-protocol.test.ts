// The context protocol between the laptop's connection and `system dial-stdio`, over a pair of
// in-memory streams instead of ssh: the hello and the version refusal with the command that fixes
// it, calls with progress, results and coded errors, Ctrl-C (the wait ends, the far side's signal
// fires), a shipped config in a private file for the call only, secrets in the call's environment
// only, and a lost connection failing the waiting call with what to do next.
import { existsSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { PassThrough } from "node:stream";
import { ControllerError } from "../src/errors.js";
import { RemoteConnection } from "../src/remote/connection.js";
import { serveStdio, type ServeCall } from "../src/remote/dial-stdio.js";
import { controllerVersion, writeLine } from "../src/remote/protocol.js";

/** A connection to a server running `call`; `cut()` breaks the streams as a killed ssh would. */
async function pair(call: ServeCall, env: NodeJS.ProcessEnv = {}) {
  const up = new PassThrough();
  const down = new PassThrough();
  const served = serveStdio(up, down, call, env);
  const connection = await RemoteConnection.open("far", down, up);
  return {
    connection,
    served,
    cut: () => {
      up.destroy();
      down.destroy();
    },
  };
}

const callOf = (action: Record<string, unknown>) => ({
  type: "call" as const,
  action,
  caller: "cli" as const,
  from: "me@laptop",
});

test("a call's progress and result come back by id, with the laptop's caller and machine; two calls wait side by side", async () => {
  const { connection, cut } = await pair(async (action, options) => {
    options.onProgress({ stage: "boot", message: `booting ${String(action.name)}` });
    await new Promise((r) => setTimeout(r, action.name === "slow" ? 50 : 1));
    return { name: action.name, relayed: options.relayed };
  });
  const events: string[] = [];
  const [slow, fast] = await Promise.all([
    connection.request(callOf({ action: "start", name: "slow" }), { onProgress: (e) => events.push(e.message) }),
    connection.request(callOf({ action: "start", name: "fast" })),
  ]);
  expect(slow).toEqual({ name: "slow", relayed: { caller: "cli", from: "me@laptop" } });
  expect(fast).toEqual({ name: "fast", relayed: { caller: "cli", from: "me@laptop" } });
  expect(events).toEqual(["booting slow"]);
  cut();
});

test("a caller the far side does not know is a library's, and a machine name it cannot print is unknown", async () => {
  const { connection, cut } = await pair(async (_action, options) => options.relayed);
  const odd = { type: "call" as const, action: { action: "ls" }, caller: "root" as never, from: "me@laptop\u001b[2J" };
  expect(await connection.request(odd)).toEqual({ caller: "library", from: "unknown" });
  cut();
});

test("a coded error keeps its code, message and hint", async () => {
  const { connection, cut } = await pair(async () => {
    throw new ControllerError("CONTROLLER_NOT_FOUND", "no instance x", { hint: "create it" });
  });
  await expect(connection.request(callOf({ action: "inspect", name: "x" }))).rejects.toMatchObject({
    code: "CONTROLLER_NOT_FOUND",
    message: "no instance x",
    hint: "create it",
  });
  cut();
});

test("Ctrl-C ends the wait here and aborts the far side's wait", async () => {
  let farSignal: AbortSignal | undefined;
  const { connection, cut } = await pair(
    (_action, options) =>
      new Promise((_resolve, reject) => {
        farSignal = options.signal;
        options.signal.addEventListener("abort", () => reject(options.signal.reason));
      }),
  );
  const abort = new AbortController();
  const waiting = connection.request(callOf({ action: "exec-status", name: "x" }), { signal: abort.signal });
  await new Promise((r) => setTimeout(r, 20));
  abort.abort(new Error("interrupted"));
  await expect(waiting).rejects.toThrow("interrupted");
  await new Promise((r) => setTimeout(r, 20));
  expect(farSignal?.aborted).toBe(true);
  cut();
});

test("the config travels as text into a private file for the call only; secrets only into its environment", async () => {
  let seen: { path: string; text: string; mode: number; secret?: string; other?: string } | undefined;
  const { connection, cut } = await pair(
    async (action, options) => {
      const path = String(action.config);
      seen = {
        path,
        text: await readFile(path, "utf8"),
        mode: (await stat(path)).mode & 0o777,
        secret: options.env.PI_SANDBOX_CONTEXT_SECRET_0,
        other: options.env.KEPT,
      };
      return {};
    },
    { KEPT: "yes" },
  );
  await connection.request({
    ...callOf({ action: "create", name: "x", config: "/laptop/path/sandbox.yaml" }),
    config: { text: "version: 1\n", name: "sandbox.yaml" },
    secrets: { PI_SANDBOX_CONTEXT_SECRET_0: "s3cret" },
  });
  expect(seen).toMatchObject({ text: "version: 1\n", mode: 0o600, secret: "s3cret", other: "yes" });
  expect(seen!.path).not.toContain("/laptop/");
  expect(existsSync(seen!.path)).toBe(false);
  cut();
});

test("a staging directory is private, and only this session's are removed", async () => {
  const { connection, cut } = await pair(async () => ({}));
  const { dir } = (await connection.request({ type: "stage" })) as { dir: string };
  expect((await stat(dir)).mode & 0o777).toBe(0o700);
  expect(await connection.request({ type: "unstage", dir: "/etc" })).toEqual({ removed: false });
  expect(await connection.request({ type: "unstage", dir })).toEqual({ removed: true });
  expect(existsSync(dir)).toBe(false);
  cut();
});

test("a lost connection fails the waiting call with CONTROLLER_CONTEXT_LOST, and says the far side goes on", async () => {
  const { connection, cut, served } = await pair(() => new Promise(() => {}));
  const waiting = connection.request(callOf({ action: "exec-status", name: "x" }));
  cut();
  await expect(waiting).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_LOST",
    hint: expect.stringContaining("goes on"),
  });
  expect(connection.closed).toBe(true);
  await expect(connection.request(callOf({ action: "ls" }))).rejects.toMatchObject({ code: "CONTROLLER_CONTEXT_LOST" });
  await served;
});

test("another version on the far side is refused with the command that fixes it", async () => {
  const up = new PassThrough();
  const down = new PassThrough();
  up.once("data", () => writeLine(down, { type: "hello", protocol: 1, version: "99.0.0" }));
  await expect(RemoteConnection.open("big", down, up)).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_VERSION_MISMATCH",
    message: expect.stringContaining(`context big runs pi-sandbox 99.0.0`),
    hint: "Upgrade this machine: npm i -g @pi-sandbox/controller@99.0.0",
  });
  // And the server hangs up on a laptop of another version after saying its own.
  const up2 = new PassThrough();
  const down2 = new PassThrough();
  const replies: string[] = [];
  down2.on("data", (chunk: Buffer) => replies.push(chunk.toString()));
  const served = serveStdio(up2, down2, async () => ({}));
  writeLine(up2, { type: "hello", protocol: 1, version: "0.0.1" });
  await served;
  expect(JSON.parse(replies.join(""))).toEqual({ type: "hello", protocol: 1, version: controllerVersion() });
});
