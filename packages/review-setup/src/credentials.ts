// Host side of live mode: the provider's access token from the host's Pi login (auth.json).
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { ReviewSetupError } from "./errors.js";

/** A credential prepared for the guest: never includes a refresh token. */
export interface GuestCredential {
  /** Provider id as in Pi's auth.json. */
  provider: string;
  /** `oauth` (short-lived access token) or `api_key`. */
  kind: "oauth" | "api_key";
  /** The auth.json entry to store in the guest agent directory. */
  entry: Record<string, unknown>;
  /** Access-token expiry (ms since epoch); undefined for API keys. */
  expiresAt: number | undefined;
}

/** Host Pi agent directory: `$PI_CODING_AGENT_DIR`, else `~/.pi/agent`. */
export function hostAgentDir(env: NodeJS.ProcessEnv): string {
  return env.PI_CODING_AGENT_DIR || join(env.HOME || homedir(), ".pi", "agent");
}

/** Tokens this close to expiry are refused: the live check and a first session need some time. */
export const MIN_TOKEN_LIFETIME_MS = 2 * 60_000;

/**
 * Reads `provider`'s credential from the host's Pi auth storage and returns what the guest may
 * hold: the access token and its expiry, with the refresh token removed (it stays on the host).
 */
export async function resolveHostCredential(
  provider: string,
  options: { env?: NodeJS.ProcessEnv; now?: number } = {},
): Promise<GuestCredential> {
  const env = options.env ?? process.env;
  const now = options.now ?? Date.now();
  const authPath = join(hostAgentDir(env), "auth.json");
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
  if (stored.type === "oauth" && typeof stored.access === "string" && stored.access !== "") {
    const expiresAt = typeof stored.expires === "number" ? stored.expires : undefined;
    if (expiresAt === undefined || expiresAt - now < MIN_TOKEN_LIFETIME_MS) {
      throw new ReviewSetupError(
        "REVIEW_SETUP_TOKEN_UNUSABLE",
        `the host's ${provider} access token ${expiresAt === undefined ? "has no expiry" : `expires at ${new Date(expiresAt).toISOString()}`}`,
        {
          hint: `Use Pi on the host once with a ${provider} model (it refreshes the login), then rerun this command.`,
          details: { provider, expiresAt },
        },
      );
    }
    const entry: Record<string, unknown> = { ...stored, refresh: "" };
    return { provider, kind: "oauth", entry, expiresAt };
  }
  if (stored.type === "api_key" && typeof stored.key === "string" && stored.key !== "") {
    if (stored.key.startsWith("!")) {
      throw new ReviewSetupError(
        "REVIEW_SETUP_TOKEN_UNUSABLE",
        `the host's ${provider} key is a command ("!…"), which only the host can run`,
        { hint: `Log in to ${provider} inside the instance instead, or use an OAuth login on the host.` },
      );
    }
    return { provider, kind: "api_key", entry: { type: "api_key", key: stored.key }, expiresAt: undefined };
  }
  throw new ReviewSetupError("REVIEW_SETUP_TOKEN_UNUSABLE", `the host's ${provider} credential has an unknown shape`, {
    hint: loginHint,
    details: { provider, type: String(stored.type) },
  });
}
