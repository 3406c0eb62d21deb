// `/sandbox context` as the user types it in Pi, and the footer's context: the list the CLI keeps
// (the context-ls action), a switch for this session that every later call follows (through the
// environment the client reads), and a name that is not a context refused. A terminal of another
// context's instance is the CLI's shell --context (its session runs there over ssh). A fake
// client; the contexts themselves are the controller's (contexts.test.ts, e2e context-ssh.test.ts).
// An egress ask of an instance there is put to the user in Pi's select and answered through the
// context, as the user's via Pi (nothing in print mode).
import { createSandboxCommand } from "../src/command.js";
import { contextStatus } from "../src/context-command.js";
import { EGRESS_CHOICES, EgressPrompts } from "../src/egress-prompts.js";
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

/** Waits until `check` holds, looking every 50 ms (the prompts look every second). */
async function until(check: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test("an egress ask of an instance on another context: asked in Pi's select, answered there through the context as the user's via Pi", async () => {
  const ask = {
    host: "registry.npmjs.org",
    port: 443,
    protocol: "https",
    method: "GET",
    waiting: 2,
    since: new Date().toISOString(),
    until: new Date(Date.now() + 60_000).toISOString(),
  };
  const sent: { input: Record<string, unknown>; options: Record<string, unknown> }[] = [];
  let answered = false;
  const env: NodeJS.ProcessEnv = { PI_SANDBOX_CONTEXT: "big" };
  const deps = {
    env,
    callAction: async (input: unknown, options: Record<string, unknown>) => {
      const action = input as Record<string, unknown>;
      if (action.action === "context-ls") return { current: "local", contexts: [{ name: "big", url: "ssh://b" }] };
      sent.push({ input: action, options });
      if (action.action === "egress-approve") answered = true;
      // What waits there; a malformed entry (a host that is no text) is not put to the user.
      return { waiting: answered ? {} : { demo: [ask, { ...ask, host: 7 }] } };
    },
  } as unknown as SandboxDependencies;
  const selects: { title: string; options: string[] }[] = [];
  const ctx = {
    hasUI: true,
    ui: {
      select: async (title: string, options: string[]) => {
        selects.push({ title, options });
        return "Allow for this instance";
      },
      notify: (message: string) => {
        throw new Error(`unexpected notice: ${message}`);
      },
    },
  };
  const prompts = new EgressPrompts(deps, () => undefined);
  // Print mode (no UI): nothing is said there and nothing asked.
  prompts.start({ hasUI: false } as never);
  await prompts.use("demo");
  expect(sent).toEqual([]);

  prompts.start(ctx as never);
  try {
    // The tool's call that names the instance first says there that this session answers.
    await prompts.use("demo");
    await until(() => answered);
  } finally {
    prompts.stop();
  }
  expect(selects).toEqual([
    {
      title:
        "demo on big wants to reach registry.npmjs.org:443 (HTTPS GET), which its allowedHosts do not list (2 requests wait). Let it?",
      options: [...EGRESS_CHOICES],
    },
  ]);
  const watch = sent.filter((s) => s.input.action === "egress-watch");
  expect(watch.length).toBeGreaterThanOrEqual(2);
  for (const { input, options } of watch) {
    expect(input).toEqual({
      action: "egress-watch",
      names: ["demo"],
      id: expect.stringMatching(/^\d+-[0-9a-f]{8}$/),
      by: "pi",
    });
    expect(options).toMatchObject({ caller: "user", via: "pi", context: "big" });
  }
  // The answer goes through the context (recorded in this machine's ledger of it) as the user's, via Pi.
  const answers = sent.filter((s) => s.input.action !== "egress-watch");
  expect(answers).toEqual([
    {
      input: { action: "egress-approve", name: "demo", host: "registry.npmjs.org" },
      options: { env, caller: "user", via: "pi", context: "big" },
    },
  ]);
});
