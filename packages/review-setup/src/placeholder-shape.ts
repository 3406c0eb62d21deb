// Placeholders shaped like the credential, for providers whose token Pi parses before it sends it:
// the guest's Pi reads the same non-secret fields from the placeholder as from the real token
// (the ChatGPT account id of a JWT, the endpoint of a Copilot token), while the secret parts
// (the JWT's signature, the Copilot HMAC) are random. The host swaps the whole placeholder for
// the real token in credential headers only. See the README's "Placeholders shaped like the token".
import { randomBytes, randomUUID } from "node:crypto";
import { ReviewSetupError } from "./errors.js";

/** How a provider's token is shaped: a ChatGPT JWT, or a Copilot `key=value;…` token. */
export type PlaceholderShape = "chatgpt-jwt" | "copilot-token";

/** The JWT claim (an object) that holds the ChatGPT account id and plan. */
export const CHATGPT_AUTH_CLAIM = "https://api.openai.com/auth";

/** Copilot token fields the placeholder keeps: expiry, plan, API endpoint, site. */
const COPILOT_KEPT_FIELDS = ["exp", "sku", "proxy-ep", "st"] as const;

/** What the guest learns from a shaped placeholder (README): identifiers and an expiry, no secret. */
export interface ShapedPlaceholder {
  /** The placeholder itself (one line of visible ASCII). */
  placeholder: string;
  /** Token expiry the placeholder carries (ms since epoch), if the token says one. */
  expiresAt: number | undefined;
  /** The API host Pi derives from the token (Copilot: `proxy.X` becomes `api.X`), if it derives one. */
  apiHost?: string;
}

/**
 * A placeholder shaped like `token`. REVIEW_SETUP_TOKEN_UNUSABLE (never quoting the token) when it
 * lacks what Pi reads from it, so no placeholder can stand for it.
 */
export function shapePlaceholder(shape: PlaceholderShape, token: string, provider: string): ShapedPlaceholder {
  const shaped = shape === "chatgpt-jwt" ? chatgptJwt(token) : copilotToken(token);
  if (!shaped) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_TOKEN_UNUSABLE",
      `the host's ${provider} access token is not ${shape === "chatgpt-jwt" ? "a JWT with a ChatGPT account id" : "a Copilot token with an endpoint (proxy-ep)"}, ` +
        "so no placeholder the guest's Pi can parse can stand for it",
      {
        hint: `Log in again on the host: run \`pi\`, then /login and choose ${provider}; then rerun this command.`,
        details: { provider, shape },
      },
    );
  }
  return shaped;
}

/** base64url without padding. */
function b64url(bytes: Buffer): string {
  return bytes.toString("base64url");
}

/** The JSON of a base64url (or base64) segment, or undefined. */
function decodeSegment(segment: string): unknown {
  try {
    return JSON.parse(Buffer.from(segment, "base64url").toString("utf8")) as unknown;
  } catch {
    return undefined;
  }
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * The real header (as sent), a payload of the claims Pi and the backend read (`exp`, `iat`, the
 * account id and plan), a random `jti` and a random signature of the real one's length. The
 * payload is re-rolled (a new `jti`) until its encoding holds no `-` or `_`: Pi decodes it with
 * `atob`, which reads only the standard alphabet.
 */
function chatgptJwt(token: string): ShapedPlaceholder | undefined {
  const parts = token.split(".");
  if (parts.length !== 3 || parts.some((part) => part === "")) return undefined;
  const [header, payload, signature] = parts as [string, string, string];
  if (!isRecord(decodeSegment(header))) return undefined;
  const claims = decodeSegment(payload);
  if (!isRecord(claims)) return undefined;
  const auth = claims[CHATGPT_AUTH_CLAIM];
  if (!isRecord(auth) || typeof auth.chatgpt_account_id !== "string" || auth.chatgpt_account_id === "")
    return undefined;
  const kept: Record<string, unknown> = {};
  for (const claim of ["iat", "exp"]) if (typeof claims[claim] === "number") kept[claim] = claims[claim];
  const account: Record<string, unknown> = { chatgpt_account_id: auth.chatgpt_account_id };
  if (typeof auth.chatgpt_plan_type === "string") account.chatgpt_plan_type = auth.chatgpt_plan_type;
  let body = "";
  for (let attempt = 0; attempt < 256; attempt++) {
    body = b64url(Buffer.from(JSON.stringify({ ...kept, [CHATGPT_AUTH_CLAIM]: account, jti: randomUUID() })));
    if (!/[-_]/.test(body)) break;
  }
  const signatureBytes = Math.max(32, Math.floor((signature.length * 3) / 4));
  const placeholder = `${header}.${body}.${b64url(randomBytes(signatureBytes))}`;
  const exp = kept.exp;
  return { placeholder, expiresAt: typeof exp === "number" ? exp * 1000 : undefined };
}

/**
 * Copilot's `tid=…;exp=…;sku=…;proxy-ep=…;…;8kp=1:<hmac>`: the expiry, plan, endpoint and site kept,
 * a random `tid` and a random HMAC of the real one's length.
 */
function copilotToken(token: string): ShapedPlaceholder | undefined {
  const fields = new Map<string, string>();
  for (const part of token.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0) fields.set(part.slice(0, eq), part.slice(eq + 1));
  }
  const endpoint = fields.get("proxy-ep");
  if (!endpoint || !/^[A-Za-z0-9.-]+$/.test(endpoint)) return undefined;
  const mac = /:([0-9a-fA-F]+)$/.exec(token)?.[1];
  const out = [`tid=${randomBytes(16).toString("hex")}`];
  for (const name of COPILOT_KEPT_FIELDS) {
    const value = fields.get(name);
    if (value !== undefined && /^[\x21-\x7e]*$/.test(value) && !value.includes(";")) out.push(`${name}=${value}`);
  }
  out.push(`8kp=1:${randomBytes(Math.max(32, Math.floor((mac?.length ?? 64) / 2))).toString("hex")}`);
  const exp = Number(fields.get("exp"));
  return {
    placeholder: out.join(";"),
    expiresAt: Number.isFinite(exp) && exp > 0 ? exp * 1000 : undefined,
    apiHost: endpoint.replace(/^proxy\./, "api."),
  };
}

/**
 * What a `placeholderFrom` file holds until live mode shapes a placeholder from a real token: a
 * line no provider accepts and no client parses, distinct per secret.
 */
export function unsetPlaceholder(name: string): string {
  return `unset-placeholder-${name}-${randomBytes(8).toString("hex")}`;
}
