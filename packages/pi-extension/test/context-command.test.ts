// `/sandbox context` as the user types it in Pi, and the footer's context: the list the CLI keeps
// (the context-ls action), a switch for this session that every later call follows (through the
// environment the client reads), and a name that is not a context refused. A terminal of another
// context's instance is the CLI's shell --context (its session runs there over ssh). A fake
// client; the contexts themselves are the controller's (contexts.test.ts, e2e context-ssh.test.ts).
import { createSandboxCommand } from "../src/command.js";
import { contextStatus } from "../src/context-command.js";
import type { SandboxDependencies } from "../src/tool.js";

function setup() {
  const told: string[] = [];
  const env: NodeJS.ProcessEnv = {};
  const calls: string[] = [];
  const deps = {
    env,
    callAction: async (input: unknown) => {
      const action = input as Record<string, unknown>;
      calls.push(`${String(action.action)}@${env.PI_SANDBOX_CONTEXT ?? "local"}`);
      if (action.action === "inspect") return { name: action.name, state: "running", previews: [] };
      if (action.action !== "context-ls") throw new Error(`unexpected ${String(action.action)}`);
      return {
        current: "local",
        contexts: [
          { name: "local", url: "" },
          { name: "big", url: "ssh://me@big.lan" },
        ],
      };
    },
  } as unknown as SandboxDependencies;
  const ctx = { hasUI: true, cwd: "/", ui: { notify: (message: string) => told.push(message) } };
  const command = createSandboxCommand(deps, {});
  return { deps, env, told, calls, run: (args: string) => command.handler(args, ctx as never) };
}

test("/sandbox context lists the contexts, /sandbox context big sends this session's calls there", async () => {
  const { deps, env, told, run } = setup();
  expect(await contextStatus(deps)).toBeUndefined();
  await run("context");
  expect(told.pop()).toBe(
    "Sandbox calls go to local. Contexts:\n* local  (this machine)\n  big  ssh://me@big.lan\nSwitch: /sandbox context <name>",
  );
  await run("context big");
  expect(env.PI_SANDBOX_CONTEXT).toBe("big");
  expect(told.pop()).toBe("Sandbox calls of this session go to big now.");
  expect(await contextStatus(deps)).toBe("context: big (ssh://me@big.lan)");
  await run("context local");
  expect(await contextStatus(deps)).toBeUndefined();
});

test("a name that is not a context is refused with how to add one", async () => {
  const { env, told, run } = setup();
  await run("context nope");
  expect(env.PI_SANDBOX_CONTEXT).toBeUndefined();
  expect(told.pop()).toBe("There is no context nope; add one with: pi-sandbox context add nope ssh://[user@]host");
});

test("/sandbox <name> in another context: the CLI's shell --context, for an instance that is there", async () => {
  const { told, calls, run } = setup();
  await run("context big");
  calls.length = 0;
  await run("demo");
  expect(told.pop()).toBe(
    "Terminal for demo on big as root (runs there over the context's ssh; run it in a terminal here):\npi-sandbox shell demo --context big",
  );
  await run("demo dev");
  expect(told.pop()).toMatch(/as dev .*\npi-sandbox shell demo dev --context big$/);
  // It was looked up there; no shell action (a key made there) was asked for.
  expect(calls.filter((c) => !c.startsWith("context-ls"))).toEqual(["inspect@big", "inspect@big"]);
});
