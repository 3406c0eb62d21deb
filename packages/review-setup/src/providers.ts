// Live mode keeps the host's Pi login on the host: each provider credential is a `network.secrets`
// entry of the instance, read from a file review-setup writes, and the guest's Pi holds only the
// placeholder. This table says which providers that works for, where their API lives and which
// environment variable the guest sees (Pi's own name for it).
import type { SecretConfig } from "@pi-sandbox/config";
import { ReviewSetupError } from "./errors.js";

/** How one provider's credentials are kept on the host. */
export interface LiveProvider {
  /** API hosts the credential is sent to (the hosts of Pi's base URLs for the provider). */
  hosts: readonly string[];
  /** Secret (and guest variable) for an API key: Pi's environment variable for the provider. */
  apiKey: string;
  /** Secret for an OAuth access token, with the start Pi recognises such a token by; absent: API keys only. */
  oauth?: { name: string; placeholderPrefix: string };
  /**
   * The header Pi sends the key in when it is not a credential header the host fills anyway
   * (`authorization`, `x-api-key`): the host puts a value into no other header.
   */
  headers?: readonly string[];
}

/**
 * Providers whose credential is a header Pi sends as it is, so a placeholder can stand for it.
 * Pi sends an Anthropic key as an OAuth token (Bearer, Claude Code headers) only when it contains
 * `sk-ant-oat`, hence that placeholder prefix.
 */
export const LIVE_PROVIDERS: Readonly<Record<string, LiveProvider>> = Object.freeze({
  anthropic: {
    hosts: ["api.anthropic.com"],
    apiKey: "ANTHROPIC_API_KEY",
    oauth: { name: "ANTHROPIC_OAUTH_TOKEN", placeholderPrefix: "sk-ant-oat01-" },
  },
  openai: { hosts: ["api.openai.com"], apiKey: "OPENAI_API_KEY" },
  google: { hosts: ["generativelanguage.googleapis.com"], apiKey: "GEMINI_API_KEY", headers: ["x-goog-api-key"] },
  openrouter: { hosts: ["openrouter.ai"], apiKey: "OPENROUTER_API_KEY" },
  xai: { hosts: ["api.x.ai"], apiKey: "XAI_API_KEY" },
  groq: { hosts: ["api.groq.com"], apiKey: "GROQ_API_KEY" },
  mistral: { hosts: ["api.mistral.ai"], apiKey: "MISTRAL_API_KEY" },
  deepseek: { hosts: ["api.deepseek.com"], apiKey: "DEEPSEEK_API_KEY" },
});

/** Logins Pi reads more from than a header value, which no placeholder can stand for. */
const NOT_A_HEADER: Readonly<Record<string, { why: string; instead: string }>> = Object.freeze({
  "openai-codex": {
    why: "Pi decodes its access token as a JWT (for the ChatGPT account id) before any request, which a placeholder cannot be",
    instead: "an OpenAI API key: on the host run `pi`, /login, OpenAI (API key), then --live-model openai/<model>",
  },
  "github-copilot": {
    why: "Pi reads the API endpoint out of its token, which a placeholder cannot carry",
    instead: "an API key of a provider in the list below",
  },
});

/** One credential as a secret: its name (the guest variable) and declaration. */
export interface LiveSecret {
  /** Secret name, also the guest's environment variable. */
  name: string;
  /** API hosts it is sent to. */
  hosts: readonly string[];
  /** Start of the guest's placeholder, if Pi needs one. */
  placeholderPrefix?: string;
  /** Extra header names the value may be put in (see {@link LiveProvider.headers}). */
  headers?: readonly string[];
}

const SUPPORTED = `Live mode keeps a login on the host for ${Object.keys(LIVE_PROVIDERS).join(", ")} (API keys) and anthropic's Claude Pro/Max login`;

/**
 * The secret that carries `provider`'s credential of `kind` (`undefined`: either kind, the check
 * before the host login is read). REVIEW_SETUP_PROVIDER_UNSUPPORTED with what to use instead.
 */
export function liveSecret(provider: string, kind: "oauth" | "api_key"): LiveSecret;
export function liveSecret(provider: string, kind?: undefined): undefined;
export function liveSecret(provider: string, kind?: "oauth" | "api_key"): LiveSecret | undefined {
  const entry = Object.hasOwn(LIVE_PROVIDERS, provider) ? LIVE_PROVIDERS[provider] : undefined;
  if (!entry) {
    const known = Object.hasOwn(NOT_A_HEADER, provider) ? NOT_A_HEADER[provider] : undefined;
    throw new ReviewSetupError(
      "REVIEW_SETUP_PROVIDER_UNSUPPORTED",
      known
        ? `live mode cannot keep the ${provider} login on the host: ${known.why}`
        : `live mode does not know the API hosts of ${provider}, so it cannot keep its credential on the host`,
      {
        hint: `Use ${known ? known.instead : "one of them"}. ${SUPPORTED}; the guest never holds the credential itself.`,
        details: { provider },
      },
    );
  }
  if (kind === undefined) return undefined;
  if (kind === "api_key") return apiKeySecret(entry);
  if (!entry.oauth) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_PROVIDER_UNSUPPORTED",
      `live mode cannot keep a ${provider} OAuth login on the host: only its API keys go into requests as they are`,
      {
        hint: `Log in to ${provider} with an API key on the host (pi, then /login), then rerun. ${SUPPORTED}.`,
        details: { provider, kind },
      },
    );
  }
  return { name: entry.oauth.name, hosts: entry.hosts, placeholderPrefix: entry.oauth.placeholderPrefix };
}

/** The secret of a provider's API key. */
function apiKeySecret(entry: LiveProvider): LiveSecret {
  return { name: entry.apiKey, hosts: entry.hosts, ...(entry.headers ? { headers: entry.headers } : {}) };
}

/** Every secret of `provider` (API key, and OAuth token where supported); empty for others. */
export function providerSecrets(provider: string): LiveSecret[] {
  const entry = Object.hasOwn(LIVE_PROVIDERS, provider) ? LIVE_PROVIDERS[provider] : undefined;
  if (!entry) return [];
  const out: LiveSecret[] = [apiKeySecret(entry)];
  if (entry.oauth)
    out.push({ name: entry.oauth.name, hosts: entry.hosts, placeholderPrefix: entry.oauth.placeholderPrefix });
  return out;
}

/** The `network.secrets` entry of `secret`, read from `file`. */
export function secretDeclaration(secret: LiveSecret, file: string): SecretConfig {
  return {
    from: `file:${file}`,
    hosts: [...secret.hosts],
    ...(secret.placeholderPrefix ? { placeholderPrefix: secret.placeholderPrefix } : {}),
    ...(secret.headers ? { headers: [...secret.headers] } : {}),
  };
}
