// The wire protocol, host side: line-delimited JSON over the agent's exec channel. The guest side
// is `agent/pi_sandbox_agent/protocol.py`.
import { randomBytes } from "node:crypto";
import { LIMITS } from "@pi-sandbox/config";

// Messages, one JSON object per line:
//
//   request   {"id": 7, "op": "exec", "args": {...}}
//   response  {"id": 7, "ok": true, "result": {...}}  or  {"id": 7, "ok": false, "error": {...}}
//   event     {"event": "service", "data": {...}}
//
// Start-up: the agent sends a `hello` event (its protocol version and facts); the host checks the
// version and sends a `hello` request carrying its own version and every limit the agent applies
// (`agentLimits()`); the agent serves nothing else until that exchange succeeded.

/** Wire protocol version this client speaks; the agent must report the same in its hello. */
export const PROTOCOL_VERSION = 2;

/** Bytes per file-transfer chunk on the wire; sent to the agent at hello. */
export const TRANSFER_CHUNK_BYTES = 256 * 1024;
/** Largest file one read returns (the agent reads it from the open file chunk by chunk); sent at hello. */
export const MAX_READ_BYTES = 256 * 1024 * 1024;
/** Largest file the agent accepts for one write; sent to the agent at hello. */
export const MAX_WRITE_BYTES = 256 * 1024 * 1024;

/** Every limit the agent applies, as the host's hello sends them: `LIMITS` plus the transfer sizes. */
export function agentLimits(): Record<string, number> {
  return {
    ...LIMITS,
    transferChunkBytes: TRANSFER_CHUNK_BYTES,
    readMaxBytes: MAX_READ_BYTES,
    writeMaxBytes: MAX_WRITE_BYTES,
  };
}

/** Random bytes the host sends at every hello, which the agent mixes into the guest kernel's pool. */
export const HELLO_ENTROPY_BYTES = 32;

/** A new guest's identity as the hello carries it (`GuestIdentity` of types.ts, which this file may not import). */
type HelloIdentity = { machineId: string; hostname: string };

/**
 * Arguments of the host's `hello` request. `entropy` (hex) reseeds the guest kernel's CRNG at
 * every attach: a guest resumed from saved memory, or one of several clones of a template's
 * memory, would otherwise go on from the random state it was saved with. `identity`, given only
 * to a new guest, is written by the agent before it serves (its acceptance says whether it was).
 */
export function helloArgs(identity?: HelloIdentity): {
  protocol: number;
  limits: Record<string, number>;
  entropy: string;
  identity?: HelloIdentity;
} {
  return {
    protocol: PROTOCOL_VERSION,
    limits: agentLimits(),
    entropy: randomBytes(HELLO_ENTROPY_BYTES).toString("hex"),
    ...(identity ? { identity: { machineId: identity.machineId, hostname: identity.hostname } } : {}),
  };
}

/** Base64 length of `bytes` bytes (with padding). */
export function base64Length(bytes: number): number {
  return 4 * Math.ceil(bytes / 3);
}

/** Worst-case growth of text under JSON escaping: a control character becomes `\u00XX`. */
const JSON_ESCAPE_FACTOR = 6;
/** Room for a message's envelope and small fields around its one large field. */
const ENVELOPE_BYTES = 64 * 1024;

/**
 * Longest line the host accepts from the agent, in bytes (about 6.4 MiB). The largest legitimate
 * replies carry text the host itself sent, echoed back (service commands and setup steps come
 * from a guest YAML of at most `LIMITS.yamlMaxBytes`), plus one large field: a file chunk as
 * base64, or output capped at `LIMITS.outputMaxBytes`. Each is counted as JSON-escaped in the
 * worst case. A longer line closes the channel with AGENT_PROTOCOL, so a hostile guest can make
 * the host hold at most this much of one line.
 */
export const MAX_AGENT_LINE_BYTES =
  JSON_ESCAPE_FACTOR * LIMITS.yamlMaxBytes +
  Math.max(base64Length(TRANSFER_CHUNK_BYTES), JSON_ESCAPE_FACTOR * LIMITS.outputMaxBytes) +
  ENVELOPE_BYTES;

/** Agent error codes that mean the two sides do not speak the same protocol. */
export const AGENT_PROTOCOL_CODES: ReadonlySet<string> = new Set(["UNKNOWN_OP", "HELLO_REQUIRED", "PROTOCOL_MISMATCH"]);

/** Event names an agent of this protocol version sends. */
export const AGENT_EVENTS: ReadonlySet<string> = new Set(["hello", "service", "protocol-error", "fatal"]);
