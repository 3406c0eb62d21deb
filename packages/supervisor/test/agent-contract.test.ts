// The wire contract between the Python agent and this client, read from the agent's source: every
// error code and event name one side uses, the other side knows.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { KNOWN_CODES } from "../src/errors.js";
import { AGENT_EVENTS, AGENT_PROTOCOL_CODES } from "../src/protocol.js";

const AGENT_DIR = fileURLToPath(new URL("../agent/pi_sandbox_agent", import.meta.url));
const python = readdirSync(AGENT_DIR)
  .filter((file) => file.endsWith(".py"))
  .map((file) => readFileSync(join(AGENT_DIR, file), "utf8"))
  .join("\n");

function matches(pattern: RegExp): Set<string> {
  return new Set([...python.matchAll(pattern)].map((match) => match[1]!));
}

/** Codes of the agent's error replies: `AgentError("X", …)`, also with the code on the next line. */
const replyCodes = matches(/AgentError\(\s*"([A-Z][A-Z0-9_]*)"/g);
/** Codes the agent writes into a result or event as `"code": "X"` (not-ready services, fatal events). */
const dataCodes = matches(/"code":\s*"([A-Z][A-Z0-9_]*)"/g);
/** Events: `wire.event("x", …)` and the bridge's hand-written `{"event": "x", …}`. */
const events = new Set([...matches(/\.event\(\s*"([a-z][a-z-]*)"/g), ...matches(/"event":\s*"([a-z][a-z-]*)"/g)]);

/** Codes of the fatal event: the host reports any of them as AGENT_START_FAILED with the code in details. */
const FATAL_CODES = new Set(["AGENT_DAEMON", "AGENT_STATE_DIR"]);
/** KNOWN_CODES the host raises itself; no agent sends them. */
const HOST_ONLY_CODES = new Set([
  "GUEST_PYTHON_MISSING",
  "AGENT_START_FAILED",
  "AGENT_CLOSED",
  "AGENT_PROTOCOL",
  "AGENT_UNRESPONSIVE",
  "SUPERVISOR_GUEST_CONFIG_NOT_FOUND",
  "SUPERVISOR_GUEST_CONFIG_INVALID",
  "SERVICE_REFERENCE_UNRESOLVED",
]);

const sorted = (set: Iterable<string>) => [...set].sort();

test("the agent source is found and parsed", () => {
  expect(replyCodes.size).toBeGreaterThan(10);
  expect(events.size).toBeGreaterThan(0);
});

test("every error code the agent sends is one the client keeps or reads as a protocol mismatch", () => {
  const understood = new Set([...KNOWN_CODES, ...AGENT_PROTOCOL_CODES, ...FATAL_CODES]);
  expect(sorted([...replyCodes, ...dataCodes].filter((code) => !understood.has(code)))).toEqual([]);
});

test("every agent code the client knows is one the agent can send", () => {
  const sent = new Set([...replyCodes, ...dataCodes]);
  const agentSide = [...KNOWN_CODES, ...AGENT_PROTOCOL_CODES, ...FATAL_CODES].filter(
    (code) => !HOST_ONLY_CODES.has(code),
  );
  expect(sorted(agentSide.filter((code) => !sent.has(code)))).toEqual([]);
  // A host-only code the agent starts sending belongs in the agent's list instead.
  expect(sorted([...HOST_ONLY_CODES].filter((code) => sent.has(code)))).toEqual([]);
});

test("the agent sends exactly the events the client accepts", () => {
  expect(sorted(events)).toEqual(sorted(AGENT_EVENTS));
});
