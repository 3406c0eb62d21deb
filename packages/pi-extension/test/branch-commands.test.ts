// `/sandbox fork`, `/sandbox rewind` and `/sandbox audit` as the user types them in Pi: the action
// each calls (as the user, not the model), and what the user is told. A fake client; the real
// actions are the controller's (branches.vm.test.ts, ledger.local.test.ts).
import { createSandboxCommand } from "../src/command.js";
import type { SandboxDependencies } from "../src/tool.js";

type Call = { action: Record<string, unknown>; caller: unknown };

function setup(answers: Record<string, unknown>) {
  const calls: Call[] = [];
  const told: string[] = [];
  const deps = {
    env: {},
    callAction: async (input: unknown, options: { caller?: unknown }) => {
      const action = input as Record<string, unknown>;
      calls.push({ action, caller: options.caller });
      if (String(action.action) in answers) return answers[String(action.action)];
      throw new Error(`unexpected ${String(action.action)}`);
    },
  } as unknown as SandboxDependencies;
  const ctx = { hasUI: true, cwd: "/", ui: { notify: (message: string) => told.push(message) } };
  const command = createSandboxCommand(deps, {});
  return { calls, told, run: (args: string) => command.handler(args, ctx as never) };
}

test("/sandbox fork dev 2 forks dev into two started copies and lists their previews", async () => {
  const { calls, told, run } = setup({
    fork: {
      source: "dev",
      forks: [{ name: "dev-1" }, { name: "dev-2" }],
      pauseMs: 2300,
      started: [
        { name: "dev-1", state: "running", previews: [{ url: "http://127.0.0.2:41001/" }] },
        { name: "dev-2", state: "running", previews: [] },
      ],
    },
  });
  await run("fork dev 2");
  expect(calls).toEqual([{ action: { action: "fork", name: "dev", count: 2 }, caller: "user" }]);
  expect(told[0]).toBe("Forked dev (paused 2.3 s):\ndev-1: running http://127.0.0.2:41001/\ndev-2: running");
});

test("/sandbox rewind takes the checkpoint first; without an attached instance it needs the name", async () => {
  const { calls, told, run } = setup({
    rewind: { name: "dev", state: "running", previews: [], before: { id: "0123456789ab" } },
  });
  await run("rewind pi:abc dev");
  expect(calls[0]).toEqual({ action: { action: "rewind", name: "dev", checkpoint: "pi:abc" }, caller: "user" });
  expect(told[0]).toBe("dev is back at checkpoint pi:abc and running; the state it left is checkpoint 0123456789ab.");
  await run("rewind");
  expect(told[1]).toMatch(/rewind takes a checkpoint/);
  expect(calls).toHaveLength(1);
});

test("/sandbox audit shows the last entries, escaped, one line each", async () => {
  const entry = (seq: number, kind: string, data: Record<string, unknown>) => ({
    seq,
    at: "2026-12-05T18:00:00.000Z",
    kind,
    data,
    prev: "0".repeat(64),
    hash: "f".repeat(64),
  });
  const { calls, told, run } = setup({
    audit: {
      entries: [
        entry(1, "lifecycle", { state: "running" }),
        entry(2, "exec", { cmd: "echo \u001b[31mred", exitCode: 0, durationMs: 5, outputBytes: 4 }),
      ],
    },
  });
  await run("audit dev");
  expect(calls[0]).toEqual({ action: { action: "audit", name: "dev", last: 20 }, caller: "user" });
  const lines = told[0]!.split("\n");
  expect(lines[0]).toBe("The last 2 entries of dev's ledger:");
  expect(lines[1]).toMatch(/^ +1 {2}2026-12-05T18:00:00.000Z {2}lifecycle {2}running$/);
  expect(lines[2]).toContain("echo \\x1b[31mred");
});
