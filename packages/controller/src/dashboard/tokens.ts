// The secrets of the dashboard's links and sessions. A link's token is a fresh random nonce with
// its HMAC under the dashboard's key: any process that can read the private state root can mint
// one (as any such process can already call every action), nobody else can guess one, and every
// `pi-sandbox dashboard` prints a new one without asking the running dashboard.
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

const SEPARATOR = ".";

function mac(key: string, nonce: string): Buffer {
  return createHmac("sha256", Buffer.from(key, "hex")).update(nonce).digest();
}

/** A fresh token for a link to the dashboard whose key is `key` (hex). */
export function mintToken(key: string): string {
  const nonce = randomBytes(16).toString("base64url");
  return `${nonce}${SEPARATOR}${mac(key, nonce).toString("base64url")}`;
}

/** Whether `token` was minted with `key`; compared in constant time. */
export function verifyToken(key: string, token: string): boolean {
  const [nonce, signature, extra] = token.split(SEPARATOR);
  if (!nonce || !signature || extra !== undefined || nonce.length > 64) return false;
  const given = Buffer.from(signature, "base64url");
  const expected = mac(key, nonce);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** A new session id for the dashboard's cookie. */
export function newSessionId(): string {
  return randomBytes(32).toString("base64url");
}
