// The secrets of the dashboard's links and sessions. A link's token is its mint time and a random
// nonce under an HMAC with the dashboard's key: any process that can read the private state root
// can mint one (as any such process can already call every action), nobody else can guess or
// re-date one, and every `pi-sandbox dashboard` prints a new one without asking the running
// dashboard.
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

const SEPARATOR = ".";
/** Bytes of the mint time at the head of a token's payload: a 48-bit count of ms since the epoch. */
const TIME_BYTES = 6;
/** Random bytes after the mint time. */
const NONCE_BYTES = 16;

/** How long a link opens a session after it was minted, in ms. */
export const LINK_TTL_MS = 10 * 60_000;
/** How far in the future a link's mint time may lie, in ms (same host: only a clock step). */
export const LINK_FUTURE_MS = 60_000;

/** What a token says once its MAC checked out. */
export interface LinkToken {
  /** The payload (mint time and random bytes, base64url): the link's identity for single use. */
  nonce: string;
  /** When it was minted, in ms since the epoch. */
  issuedAtMs: number;
}

/** Why a token opens no session. */
export type TokenFault =
  /** Not a token of this dashboard's key (another dashboard's, an edited one, a date changed by hand). */
  | "foreign"
  /** Minted more than {@link LINK_TTL_MS} ago. */
  | "expired"
  /** Minted more than {@link LINK_FUTURE_MS} ahead of this clock. */
  | "future";

/** The verdict on a token: its content, or why it opens no session. */
export type TokenCheck = ({ ok: true } & LinkToken) | { ok: false; fault: TokenFault };

function mac(key: string, payload: string): Buffer {
  return createHmac("sha256", Buffer.from(key, "hex")).update(payload).digest();
}

/**
 * A fresh token for a link to the dashboard whose key is `key` (hex), minted at `nowMs`. The mint
 * time travels inside the one payload the MAC covers (`<payload>.<mac>`, as before times were
 * added), so a dashboard started by an older release still accepts the links a newer CLI prints.
 */
export function mintToken(key: string, nowMs: number = Date.now()): string {
  const payload = Buffer.alloc(TIME_BYTES + NONCE_BYTES);
  payload.writeUIntBE(Math.max(0, Math.floor(nowMs)), 0, TIME_BYTES);
  randomBytes(NONCE_BYTES).copy(payload, TIME_BYTES);
  const nonce = payload.toString("base64url");
  return `${nonce}${SEPARATOR}${mac(key, nonce).toString("base64url")}`;
}

/**
 * Checks `token` against `key` (MAC compared in constant time) and its mint time against `nowMs`.
 * Single use is the caller's part: it remembers the nonces it let in.
 */
export function checkToken(key: string, token: string, nowMs: number): TokenCheck {
  const [nonce, signature, extra] = token.split(SEPARATOR);
  if (!nonce || !signature || extra !== undefined || nonce.length > 64) return { ok: false, fault: "foreign" };
  const given = Buffer.from(signature, "base64url");
  const expected = mac(key, nonce);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return { ok: false, fault: "foreign" };
  const payload = Buffer.from(nonce, "base64url");
  // A signed payload of another length is a link of a release without mint times: it cannot be bounded.
  if (payload.length !== TIME_BYTES + NONCE_BYTES) return { ok: false, fault: "expired" };
  const issuedAtMs = payload.readUIntBE(0, TIME_BYTES);
  if (issuedAtMs > nowMs + LINK_FUTURE_MS) return { ok: false, fault: "future" };
  if (nowMs - issuedAtMs > LINK_TTL_MS) return { ok: false, fault: "expired" };
  return { ok: true, nonce, issuedAtMs };
}

/** A new session id for the dashboard's cookie. */
export function newSessionId(): string {
  return randomBytes(32).toString("base64url");
}
