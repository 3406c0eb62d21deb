// Live mode keeps the host's Pi login on the host: each provider credential is a `network.secrets`
// entry of the instance, read from a file review-setup writes, and the guest's Pi holds only the
// placeholder. This table says which providers that works for, where their API lives and which
// environment variable the guest sees (Pi's own name for it, where Pi has one).
import type { SecretConfig } from "@pi-sandbox/config";
import { ReviewSetupError } from "./errors.js";
import type { PlaceholderShape } from "./placeholder-shape.js";

/** How one provider's credentials are kept on the host. */
export interface LiveProvider {
  /** API hosts the credential is sent to (the hosts of Pi's base URLs for the provider). */
  hosts: readonly string[];
  /** Secret (and guest variable) for an API key: Pi's environment variable for the provider; absent: OAuth only. */
  apiKey?: string;
  /**
   * Secret for an OAuth access token: with the start Pi recognises such a token by, or the shape
   * of a token Pi parses (the placeholder then carries its non-secret fields); absent: API keys only.
   */
  oauth?: { name: string; placeholderPrefix?: string; shape?: PlaceholderShape };
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
  // Pi decodes the ChatGPT access token as a JWT (the account id) before any request.
  "openai-codex": { hosts: ["chatgpt.com"], oauth: { name: "OPENAI_CODEX_ACCESS_TOKEN", shape: "chatgpt-jwt" } },
  // Pi reads the API endpoint out of the Copilot token (proxy-ep): individual, business or enterprise.
  "github-copilot": {
    hosts: ["api.individual.githubcopilot.com", "api.business.githubcopilot.com", "api.enterprise.githubcopilot.com"],
    oauth: { name: "GITHUB_COPILOT_ACCESS_TOKEN", shape: "copilot-token" },
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
  /** The token's shape, for a token Pi parses: the placeholder is shaped from the real token (`placeholderFrom`). */
  shape?: PlaceholderShape;
  /** Extra header names the value may be put in (see {@link LiveProvider.headers}). */
  headers?: readonly string[];
}

const SUPPORTED =
  `Live mode keeps a login on the host for ${Object.keys(LIVE_PROVIDERS)
    .filter((id) => LIVE_PROVIDERS[id]!.apiKey)
    .join(", ")} (API keys), ` + "anthropic's Claude Pro/Max, openai-codex (ChatGPT) and github-copilot logins";

/**
 * The secret that carries `provider`'s credential of `kind` (`undefined`: either kind, the check
 * before the host login is read). REVIEW_SETUP_PROVIDER_UNSUPPORTED with what to use instead.
 */
export function liveSecret(provider: string, kind: "oauth" | "api_key"): LiveSecret;
export function liveSecret(provider: string, kind?: undefined): undefined;
export function liveSecret(provider: string, kind?: "oauth" | "api_key"): LiveSecret | undefined {
  const entry = Object.hasOwn(LIVE_PROVIDERS, provider) ? LIVE_PROVIDERS[provider] : undefined;
  if (!entry) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_PROVIDER_UNSUPPORTED",
      `live mode does not know the API hosts of ${provider} or the shape of its token, so it cannot keep its credential on the host`,
      {
        hint: `Use one of these instead: ${SUPPORTED}; the guest never holds the credential itself.`,
        details: { provider },
      },
    );
  }
  if (kind === undefined) return undefined;
  if (kind === "api_key") {
    if (entry.apiKey) return apiKeySecret(entry, entry.apiKey);
    throw new ReviewSetupError(
      "REVIEW_SETUP_PROVIDER_UNSUPPORTED",
      `live mode takes only the ${provider} OAuth login, not an API key stored for it`,
      {
        hint: `Log in to ${provider} on the host with pi, then /login and choose ${provider}; then rerun. ${SUPPORTED}.`,
        details: { provider, kind },
      },
    );
  }
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
  return oauthSecret(entry, entry.oauth);
}

/** The secret of a provider's API key. */
function apiKeySecret(entry: LiveProvider, name: string): LiveSecret {
  return { name, hosts: entry.hosts, ...(entry.headers ? { headers: entry.headers } : {}) };
}

/** The secret of a provider's OAuth access token. */
function oauthSecret(entry: LiveProvider, oauth: NonNullable<LiveProvider["oauth"]>): LiveSecret {
  return {
    name: oauth.name,
    hosts: entry.hosts,
    ...(oauth.placeholderPrefix ? { placeholderPrefix: oauth.placeholderPrefix } : {}),
    ...(oauth.shape ? { shape: oauth.shape } : {}),
  };
}

/** Every secret of `provider` (API key, and OAuth token where supported); empty for others. */
export function providerSecrets(provider: string): LiveSecret[] {
  const entry = Object.hasOwn(LIVE_PROVIDERS, provider) ? LIVE_PROVIDERS[provider] : undefined;
  if (!entry) return [];
  const out: LiveSecret[] = entry.apiKey ? [apiKeySecret(entry, entry.apiKey)] : [];
  if (entry.oauth) out.push(oauthSecret(entry, entry.oauth));
  return out;
}

/** Where a shaped secret's placeholder is kept, next to its value file. */
export function placeholderFile(file: string): string {
  return `${file}.placeholder`;
}

/** The `network.secrets` entry of `secret`, read from `file` (a shaped one's placeholder from `placeholderFile`). */
export function secretDeclaration(secret: LiveSecret, file: string): SecretConfig {
  return {
    from: `file:${file}`,
    hosts: [...secret.hosts],
    ...(secret.placeholderPrefix ? { placeholderPrefix: secret.placeholderPrefix } : {}),
    ...(secret.shape ? { placeholderFrom: `file:${placeholderFile(file)}` } : {}),
    ...(secret.headers ? { headers: [...secret.headers] } : {}),
  };
}
