// The agent's asynchronous messages: each event's name and payload checked and cut to size before
// any listener sees it (the channel, channel.ts, keeps the per-channel rules: one hello, a bounded
// number of protocol notes logged).

import { isValidServiceName } from "@pi-sandbox/config";
import { AGENT_EVENTS } from "./protocol.js";
import {
  BadReply,
  message as messageText,
  oneOf,
  optionalInteger,
  optionalText,
  record,
  text,
} from "./reply-checks.js";

/** An asynchronous message from the agent (service start/exit/ready, protocol problems). */
export interface AgentEvent {
  /** Event name: `hello`, `service`, `protocol-error`, `fatal`. */
  event: string;
  /** Event payload, checked and with its text cut to size. */
  data: Record<string, unknown>;
}

/** Longest `protocol-error` message kept. */
const PROTOCOL_NOTE_CHARS = 200;

/** The event in an agent line (`{event, data}`), checked; throws BadReply otherwise. */
export function checkEvent(message: Record<string, unknown>): AgentEvent {
  const name = text(message.event, "event name", 64);
  if (!AGENT_EVENTS.has(name)) throw new BadReply("event", `${JSON.stringify(name)} is not one of this protocol`);
  const data = record(message.data, `${name} event data`);
  if (name === "hello") return { event: name, data }; // the start-up code checks it (version first)
  if (name === "service") return { event: name, data: serviceEvent(data) };
  if (name === "fatal") {
    return {
      event: name,
      data: { code: optionalText(data.code, "fatal code", 64), message: messageText(data.message, "fatal message") },
    };
  }
  return { event: name, data: { message: messageText(data.message, "protocol-error message", PROTOCOL_NOTE_CHARS) } };
}

/** A service event with its fields checked. */
function serviceEvent(data: Record<string, unknown>): Record<string, unknown> {
  const service = text(data.service, "service event name", 64);
  if (!isValidServiceName(service)) throw new BadReply("service event name", "is not a service name");
  const type = oneOf(data.type, "service event type", ["start", "exit", "ready", "not-ready"] as const);
  const checked: Record<string, unknown> = { service, type };
  const pid = optionalInteger(data.pid, "service event pid", 1);
  const port = optionalInteger(data.port, "service event port", 1, 65535);
  const exitCode = optionalInteger(data.exitCode, "service event exitCode", 0, 255);
  const signal = optionalText(data.signal, "service event signal", 32);
  const at = optionalText(data.at, "service event at", 64);
  if (pid !== undefined) checked.pid = pid;
  if (port !== undefined) checked.port = port;
  if (exitCode !== undefined) checked.exitCode = exitCode;
  if (signal !== undefined) checked.signal = signal;
  if (at !== undefined) checked.at = at;
  if (data.error !== undefined && data.error !== null) checked.error = messageText(data.error, "service event error");
  return checked;
}
