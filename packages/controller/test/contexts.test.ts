// Contexts as the user keeps them: add, ls, use, rm through the actions and the CLI's words, the
// file in the config directory (0600 in 0700), names and ssh URLs refused before anything is
// written, --context / PI_SANDBOX_CONTEXT / `use` choosing one, and `local` always there.
import { jest } from "@jest/globals";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction } from "../src/client/index.js";
import { takeContextFlag } from "../src/cli/context-flag.js";
import { runCli } from "../src/cli/cli.js";
import { configDir, listContexts, parseSshUrl, selectContext } from "../src/state/contexts.js";

let base: string;
let env: NodeJS.ProcessEnv;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "ctx-"));
  env = { ...process.env, XDG_CONFIG_HOME: join(base, "config"), PI_SANDBOX_HOME: join(base, "state") };
  delete env.PI_SANDBOX_CONTEXT;
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

const call = (action: Record<string, unknown>) => callAction(action, { env });

test("local is there from the start, and the default", async () => {
  expect(await call({ action: "context-ls" })).toEqual({ current: "local", contexts: [{ name: "local", url: "" }] });
  expect(await selectContext(undefined, env)).toBeUndefined();
});

test("add, use, ls and rm keep the contexts in a private file of the config directory", async () => {
  await call({ action: "context-add", context: "big", url: "ssh://me@big.lan:2222" });
  await call({ action: "context-add", context: "alias", url: "ssh://buildbox" });
  const file = join(configDir(env), "contexts.json");
  expect((await stat(file)).mode & 0o777).toBe(0o600);
  expect((await stat(configDir(env))).mode & 0o777).toBe(0o700);
  await call({ action: "context-use", context: "big" });
  expect(await call({ action: "context-ls" })).toEqual({
    current: "big",
    contexts: [
      { name: "local", url: "" },
      { name: "alias", url: "ssh://buildbox" },
      { name: "big", url: "ssh://me@big.lan:2222" },
    ],
  });
  expect(await selectContext(undefined, env)).toMatchObject({ name: "big", user: "me", host: "big.lan", port: 2222 });
  // --context and PI_SANDBOX_CONTEXT pick another for one command; local names this machine.
  expect(await selectContext("alias", env)).toMatchObject({ name: "alias", host: "buildbox" });
  expect(await selectContext(undefined, { ...env, PI_SANDBOX_CONTEXT: "alias" })).toMatchObject({ name: "alias" });
  expect(await selectContext("local", env)).toBeUndefined();
  // Removing the one in use goes back to local.
  await call({ action: "context-rm", context: "big" });
  expect(await selectContext(undefined, env)).toBeUndefined();
  expect(JSON.parse(await readFile(file, "utf8")).contexts).toEqual({ alias: { url: "ssh://buildbox" } });
});

test("bad names, bad URLs, taken names and unknown contexts are typed errors that say what to do", async () => {
  await expect(call({ action: "context-add", context: "../x", url: "ssh://h" })).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_INVALID",
    hint: expect.stringContaining("context add"),
  });
  await expect(call({ action: "context-add", context: "local", url: "ssh://h" })).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_EXISTS",
  });
  await call({ action: "context-add", context: "h", url: "ssh://h" });
  await expect(call({ action: "context-add", context: "h", url: "ssh://h2" })).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_EXISTS",
    hint: expect.stringContaining("context rm h"),
  });
  await expect(call({ action: "context-use", context: "nope" })).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_NOT_FOUND",
    hint: expect.stringContaining("context ls"),
  });
  await expect(call({ action: "context-rm", context: "local" })).rejects.toMatchObject({
    code: "CONTROLLER_CONTEXT_INVALID",
  });
  await expect(selectContext("nope", env)).rejects.toMatchObject({ code: "CONTROLLER_CONTEXT_NOT_FOUND" });
  // Nothing was written for the refused ones.
  expect((await listContexts(env)).contexts.map((c) => c.name)).toEqual(["local", "h"]);
});

test("context changes are the user's: a model's call is refused", async () => {
  await expect(callAction({ action: "context-use", context: "local" }, { env, caller: "model" })).rejects.toMatchObject(
    { code: "CONTROLLER_USER_ONLY" },
  );
});

test("ssh URLs: user, host and port; nothing that ssh could read as an option or that holds a password", () => {
  expect(parseSshUrl("ssh://host")).toEqual({ url: "ssh://host", host: "host" });
  expect(parseSshUrl("ssh://a.b@h-1.example.org:22")).toEqual({
    url: "ssh://a.b@h-1.example.org:22",
    user: "a.b",
    host: "h-1.example.org",
    port: 22,
  });
  expect(parseSshUrl("ssh://u@[::1]:2200")).toMatchObject({ host: "::1", port: 2200 });
  for (const bad of [
    "host",
    "http://host",
    "ssh://-oProxyCommand=x",
    "ssh://u:pw@host",
    "ssh://-l@host",
    "ssh://host/path",
    "ssh://host?x=1",
    "ssh://",
    "ssh://host:99999",
    "ssh://h%20x",
  ]) {
    expect(() => parseSshUrl(bad)).toThrow(expect.objectContaining({ code: "CONTROLLER_CONTEXT_INVALID" }));
  }
});

test("--context is taken anywhere before --, in both spellings", () => {
  expect(takeContextFlag(["ls", "--context", "big"])).toEqual({ argv: ["ls"], context: "big" });
  expect(takeContextFlag(["--context=big", "exec", "x", "--", "a", "--context", "c"])).toEqual({
    argv: ["exec", "x", "--", "a", "--context", "c"],
    context: "big",
  });
  expect(() => takeContextFlag(["ls", "--context"])).toThrow(expect.objectContaining({ code: "CONTROLLER_USAGE" }));
});

test("the CLI's context words, and a command sent to an unknown context", async () => {
  const saved = { ...process.env };
  Object.assign(process.env, { XDG_CONFIG_HOME: env.XDG_CONFIG_HOME, PI_SANDBOX_HOME: env.PI_SANDBOX_HOME });
  const writes: string[] = [];
  const spy = jest.spyOn(process.stdout, "write").mockImplementation((chunk) => (writes.push(String(chunk)), true));
  const errs: string[] = [];
  const errSpy = jest.spyOn(process.stderr, "write").mockImplementation((chunk) => (errs.push(String(chunk)), true));
  try {
    expect(await runCli(["context", "add", "big", "ssh://me@big.lan"])).toBe(0);
    expect(await runCli(["context", "ls"])).toBe(0);
    expect(writes.join("")).toMatch(/^local \*\s+\(this machine\)$/m);
    expect(writes.join("")).toMatch(/^big\s+ssh:\/\/me@big\.lan$/m);
    expect(await runCli(["ls", "--context", "nope"])).toBe(1);
    expect(errs.join("")).toMatch(/CONTROLLER_CONTEXT_NOT_FOUND: there is no context "nope"/);
  } finally {
    spy.mockRestore();
    errSpy.mockRestore();
    process.env = saved;
  }
});
