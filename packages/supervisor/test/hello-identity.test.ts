// A new guest's identity in the host's hello: sent only when asked for, and counted as applied only
// when the agent's acceptance says exactly that (a guest's claim spares an exec, nothing more).
import { SupervisorClient } from "../src/index.js";
import { PROTOCOL_VERSION, helloArgs } from "../src/protocol.js";
import { ScriptedAgent, scriptedVm } from "./support/scripted-agent.js";

const identity = { machineId: "0123456789abcdef0123456789abcdef", hostname: "web-2" };

/** A client started over a scripted agent whose hello acceptance carries `extra`. */
async function startWith(extra: Record<string, unknown>, withIdentity = true) {
  const agent = new ScriptedAgent();
  agent.onRequest = (request) => {
    if (request.op === "hello") agent.reply(request.id, { protocol: PROTOCOL_VERSION, ...extra });
  };
  const client = await SupervisorClient.start({ vm: scriptedVm(agent), ...(withIdentity ? { identity } : {}) });
  const hello = agent.requests.find((r) => r.op === "hello");
  await client.close();
  return { applied: client.identityApplied, sent: hello?.args.identity };
}

test("a hello carries the identity only when the start names one", () => {
  expect(helloArgs().identity).toBeUndefined();
  expect(helloArgs(identity).identity).toEqual(identity);
});

test("the agent's acceptance with identity true counts the identity as applied", async () => {
  expect(await startWith({ identity: true })).toEqual({ applied: true, sent: identity });
});

test("an acceptance without it (an older agent), or with anything but true, leaves it unapplied", async () => {
  for (const extra of [{}, { identity: false }, { identity: "true" }, { identity: 1 }, { identity: { ok: true } }]) {
    expect(await startWith(extra)).toEqual({ applied: false, sent: identity });
  }
});

test("a start without an identity sends none and never counts one as applied", async () => {
  expect(await startWith({ identity: true }, false)).toEqual({ applied: false, sent: undefined });
});
