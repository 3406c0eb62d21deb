// Host side of live mode: the provider's access token or API key from the host's Pi login
// (auth.json), refreshed through Pi when it is about to expire. It stays on the host.
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { ReviewSetupError } from "./errors.js";
import { refreshHostLoginWithPi, type HostLoginRefresher } from "./pi-login.js";

/** The host's credential for a provider: stays on the host, never includes a refresh token. */
export interface HostCredential {
  /** Provider id as in Pi's auth.json. */
  provider: string;
  /** `oauth` (short-lived access token) or `api_key`. */
  kind: "oauth" | "api_key";
  /** The access token or API key: written only to the host's secret file, never to the guest. */
  value: string;
  /** Access-token expiry (ms since epoch); undefined for API keys. */
  expiresAt: number | undefined;
  /** True when the host login was refreshed through Pi first (the token was expiring). */
  refreshed: boolean;
}

/** Host Pi agent directory: `$PI_CODING_AGENT_DIR`, else `~/.pi/agent`. */
export function hostAgentDir(env: NodeJS.ProcessEnv): string {
  return env.PI_CODING_AGENT_DIR || join(env.HOME || homedir(), ".pi", "agent");
}

/** Tokens this close to expiry are refused: the live check and a first session need some time. */
export const MIN_TOKEN_LIFETIME_MS = 2 * 60_000;

/**
 * An OAuth token with less validity than this is refreshed on the host first (through Pi), so the
 * guest, which cannot refresh it, gets as much time as the provider grants.
 */
export const REFRESH_BELOW_MS = 10 * 60_000;

/** Options of `resolveHostCredential`. */
export interface ResolveHostCredentialOptions {
  /** Host environment (`PI_CODING_AGENT_DIR`, `HOME`); default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** Current time (ms). */
  now?: number;
  /** Refreshes an expiring OAuth login in auth.json; default Pi's SDK (`refreshHostLoginWithPi`). */
  refreshLogin?: HostLoginRefresher;
  /** Cancels waiting for auth.json's lock. */
  signal?: AbortSignal;
  /** Called with the stored login's kind before any refresh; throws to refuse it. */
  accept?: (kind: "oauth" | "api_key") => void;
}

/**
 * Reads `provider`'s credential from the host's Pi auth storage: the access token and its expiry
 * (the refresh token is never taken), or the API key. An OAuth token with less than
 * REFRESH_BELOW_MS left is first refreshed through Pi, which writes the new tokens to the host's
 * auth.json as a Pi session would.
 */
export async function resolveHostCredential(
  provider: string,
  options: ResolveHostCredentialOptions = {},
): Promise<HostCredential> {
  const env = options.env ?? process.env;
  const now = options.now ?? Date.now();
  const authPath = join(hostAgentDir(env), "auth.json");
  const first = await readStored(provider, authPath);
  if (first.type === "oauth" || first.type === "api_key") options.accept?.(first.type);
  if (first.type !== "oauth" || typeof first.access !== "string" || first.access === "") {
    return credentialFrom(provider, authPath, first, now, false);
  }
  const expires = typeof first.expires === "number" ? first.expires : undefined;
  if (expires !== undefined && expires - now >= REFRESH_BELOW_MS) {
    return credentialFrom(provider, authPath, first, now, false);
  }
  await (options.refreshLogin ?? refreshHostLoginWithPi)({
    provider,
    authPath,
    minValidityMs: REFRESH_BELOW_MS,
    signal: options.signal,
  });
  return credentialFrom(provider, authPath, await readStored(provider, authPath), now, true);
}

async function readStored(provider: string, authPath: string): Promise<Record<string, unknown>> {
  const loginHint = `Log in on the host first: run \`pi\`, then /login and choose ${provider}.`;
  let data: Record<string, unknown>;
  try {
    data = JSON.parse(await readFile(authPath, "utf8")) as Record<string, unknown>;
  } catch (error) {
    const missing = (error as NodeJS.ErrnoException).code === "ENOENT";
    throw new ReviewSetupError(
      "REVIEW_SETUP_LOGIN_MISSING",
      missing ? `no Pi login on this host (${authPath} does not exist)` : `cannot read ${authPath}: ${String(error)}`,
      { hint: loginHint, details: { authPath }, cause: error },
    );
  }
  const stored = data[provider] as Record<string, unknown> | undefined;
  if (!stored || typeof stored !== "object") {
    throw new ReviewSetupError("REVIEW_SETUP_LOGIN_MISSING", `the host's Pi login has no credential for ${provider}`, {
      hint: loginHint,
      details: { authPath, provider },
    });
  }
  return stored;
}

function credentialFrom(
  provider: string,
  authPath: string,
  stored: Record<string, unknown>,
  now: number,
  refreshed: boolean,
): HostCredential {
  const loginHint = `Log in on the host first: run \`pi\`, then /login and choose ${provider}.`;
  if (stored.type === "oauth" && typeof stored.access === "string" && stored.access !== "") {
    const expiresAt = typeof stored.expires === "number" ? stored.expires : undefined;
    if (expiresAt === undefined || expiresAt - now < MIN_TOKEN_LIFETIME_MS) {
      throw new ReviewSetupError(
        "REVIEW_SETUP_TOKEN_UNUSABLE",
        `the host's ${provider} access token ${expiresAt === undefined ? "has no expiry" : `expires at ${new Date(expiresAt).toISOString()}`}` +
          (refreshed ? " even after Pi refreshed the login" : ""),
        {
          hint: `Log in again on the host: run \`pi\`, then /login and choose ${provider}; then rerun this command.`,
          details: { provider, expiresAt, authPath },
        },
      );
    }
    return { provider, kind: "oauth", value: stored.access, expiresAt, refreshed };
  }
  if (stored.type === "api_key" && typeof stored.key === "string" && stored.key !== "") {
    if (stored.key.startsWith("!")) {
      throw new ReviewSetupError(
        "REVIEW_SETUP_TOKEN_UNUSABLE",
        `the host's ${provider} key is a command ("!…"), which only the host can run`,
        { hint: `Log in to ${provider} inside the instance instead, or use an OAuth login on the host.` },
      );
    }
    return {
      provider,
      kind: "api_key",
      value: stored.key,
      expiresAt: undefined,
      refreshed: false,
    };
  }
  throw new ReviewSetupError("REVIEW_SETUP_TOKEN_UNUSABLE", `the host's ${provider} credential has an unknown shape`, {
    hint: loginHint,
    details: { provider, type: String(stored.type) },
  });
}
