// Guest side of live mode: the placeholder in the private agent dir, then one real response.
import { shellQuote } from "@pi-sandbox/config";
import type { CallActionOptions } from "@pi-sandbox/controller/client";
import type { HostCredential } from "./credentials.js";
import { ReviewSetupError } from "./errors.js";
import type { ControllerOptions, GuestSession } from "./guest.js";
import { pushLiveSecret } from "./host-secrets.js";
import { launchCommand } from "./launch.js";
import type { ReviewLayout } from "./layout.js";
import { shapePlaceholder, type ShapedPlaceholder } from "./placeholder-shape.js";
import type { LiveSecret } from "./providers.js";

/** Token usage of the live check's response, as Pi reports it. */
export interface TokenUsage {
  /** Prompt tokens. */
  input: number;
  /** Generated tokens. */
  output: number;
  /** Total tokens. */
  totalTokens: number;
}

/** What the live check proved. */
export interface LiveCheck {
  /** `provider/model` used. */
  model: string;
  /** Text the model generated (trimmed, at most 200 characters). */
  response: string;
  /** Provider-reported usage. */
  usage: TokenUsage;
  /** Access-token expiry (ms since epoch); undefined for an API key. */
  expiresAt: number | undefined;
  /** Guest path of the live check's log. */
  logPath: string;
}

/** The prompt of the live check. */
export const LIVE_PROMPT = "Reply with the single word: ready";

// In the guest: the provider's entry in auth.json becomes an API-key entry holding the placeholder
// the guest sees in the secret's variable (an API-key entry, so Pi never tries to refresh it; the
// placeholder's prefix tells Pi an Anthropic OAuth token from a key), or the entry given as JSON
// (a shaped placeholder, which changes with each token), and a models.json override of the
// provider goes. Exit 3: the variable is not set (the instance lacks the secret).
const STORE_JS =
  `const fs=require("fs");const [f,m,p,n,e]=process.argv.slice(1);const key=process.env[n];` +
  `if(!key&&!e){console.log("the guest has no "+n+" in its environment");process.exit(3)}` +
  `let j={};try{j=JSON.parse(fs.readFileSync(f,"utf8"))}catch{}if(!j||typeof j!=="object"||Array.isArray(j))j={};` +
  `j[p]=e?JSON.parse(e):{type:"api_key",key};fs.writeFileSync(f,JSON.stringify(j,null,2)+"\\n",{mode:0o600});fs.chmodSync(f,0o600);` +
  `if(fs.existsSync(m)){const x=JSON.parse(fs.readFileSync(m,"utf8"));` +
  `if(x.providers&&x.providers[p]){delete x.providers[p];fs.writeFileSync(m,JSON.stringify(x,null,2))}}` +
  `console.log("stored "+fs.statSync(f).mode.toString(8).slice(-3))`;

/**
 * Points the guest's Pi at the secret: `<agentDir>/auth.json` (0600, directory 0700) gets
 * `provider` as an API-key entry holding the placeholder of `secretName` (other providers'
 * entries kept), and a guest models.json override of that provider is dropped so the candidate
 * uses the provider's normal backend. No credential reaches the guest.
 */
export async function storeGuestCredential(
  guest: GuestSession,
  layout: ReviewLayout,
  credential: {
    provider: string;
    secretName: string;
    /** The auth.json entry to write instead of the variable's placeholder (a shaped placeholder's). */
    entry?: Record<string, unknown>;
  },
  signal?: AbortSignal,
): Promise<void> {
  const dir = shellQuote(layout.agentDir);
  const auth = `${layout.agentDir}/auth.json`;
  const models = `${layout.agentDir}/models.json`;
  const result = await guest.exec(
    `umask 077 && mkdir -p ${dir} && chmod 700 ${dir} && node -e ${shellQuote(STORE_JS)} ` +
      `${shellQuote(auth)} ${shellQuote(models)} ${shellQuote(credential.provider)} ${shellQuote(credential.secretName)}` +
      (credential.entry ? ` ${shellQuote(JSON.stringify(credential.entry))}` : ""),
    { signal },
  );
  if (result.exitCode !== 0 || result.output.trim().split("\n").pop() !== "stored 600") {
    throw stepFailed("credentials", result.output);
  }
}

/** The `credentials` step's start line: which credential, kept as which secret. */
export function credentialStartMessage(credential: HostCredential, secret: LiveSecret): string {
  const what = credential.kind === "oauth" ? "access token" : "API key";
  return `keeping the ${credential.provider} ${what} on the host: secret ${secret.name} for ${secret.hosts.join(", ")}`;
}

/**
 * The placeholder shaped from `credential`'s token for a shaped `secret` (a fresh random part each
 * call). REVIEW_SETUP_TOKEN_UNUSABLE for a token Pi could not parse; REVIEW_SETUP_PROVIDER_UNSUPPORTED
 * for one that points Pi at an API host the secret is not sent to (the VM would refuse it there).
 * Called before any guest work too, to fail early.
 */
export function shapeFor(secret: LiveSecret, credential: HostCredential): ShapedPlaceholder {
  const shaped = shapePlaceholder(secret.shape!, credential.value, credential.provider);
  if (shaped.apiHost && !secret.hosts.includes(shaped.apiHost)) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_PROVIDER_UNSUPPORTED",
      `the host's ${credential.provider} token points Pi at ${shaped.apiHost}, which live mode does not send the token to ` +
        `(it knows ${secret.hosts.join(", ")})`,
      {
        hint: "Use a login whose API endpoint is one of those, or another provider's API key.",
        details: { provider: credential.provider, apiHost: shaped.apiHost },
      },
    );
  }
  return shaped;
}

/**
 * The `credentials` step: the value into the host's secret file and the running VM
 * (`pushLiveSecret`), the placeholder into the guest's auth.json (`storeGuestCredential`).
 * Resolves with the step's done line.
 */
export async function keepCredentialOnHost(
  guest: GuestSession,
  layout: ReviewLayout,
  options: {
    credential: HostCredential;
    secret: LiveSecret;
    dir: string;
    instance: string;
    controller: ControllerOptions;
    callAction?: (input: unknown, options?: CallActionOptions) => Promise<unknown>;
    signal?: AbortSignal;
  },
): Promise<string> {
  const { credential, secret, signal } = options;
  const shaped = secret.shape ? shapeFor(secret, credential) : undefined;
  await pushLiveSecret({
    ...options,
    provider: credential.provider,
    value: credential.value,
    ...(shaped ? { placeholder: shaped.placeholder } : {}),
  });
  await storeGuestCredential(
    guest,
    layout,
    {
      provider: credential.provider,
      secretName: secret.name,
      ...(shaped ? { entry: guestEntry(shaped.placeholder, credential.expiresAt) } : {}),
    },
    signal,
  );
  return (
    `the VM puts it into requests to ${secret.hosts.join(", ")}; the guest's auth.json holds the ` +
    (shaped ? `placeholder shaped like the token (${secret.shape})` : `placeholder of ${secret.name}`) +
    (credential.expiresAt === undefined
      ? " (an API key: it does not expire)"
      : `; the token expires at ${new Date(credential.expiresAt).toISOString()}` +
        (credential.refreshed ? " (the host's login was refreshed through Pi first)" : ""))
  );
}

/** What the guest's auth.json holds instead of the refresh token, which stays on the host. */
export const GUEST_REFRESH_TOKEN = "kept-on-the-host-by-review-setup";

/**
 * The guest's auth.json entry for a shaped placeholder: an OAuth entry, as Pi takes the ChatGPT and
 * Copilot logins only in that form (it decodes the account id, reads the endpoint). Its expiry is
 * the real token's; its refresh token is a stand-in the guest cannot use, so the guest's Pi cannot
 * refresh it and stops at expiry: rerun the refresh then (the host refreshes and pushes both).
 */
export function guestEntry(placeholder: string, expiresAt: number | undefined): Record<string, unknown> {
  return { type: "oauth", access: placeholder, refresh: GUEST_REFRESH_TOKEN, expires: expiresAt ?? 0 };
}

/** Runs the candidate's Pi once in JSON mode and requires a generated response with usage. */
export async function runLiveCheck(
  guest: GuestSession,
  layout: ReviewLayout,
  options: { piCommand: string; model: string; expiresAt: number | undefined; log: string; signal?: AbortSignal },
): Promise<LiveCheck> {
  const command = launchCommand(layout, {
    piCommand: options.piCommand,
    model: options.model,
    extraArgs: ["--no-session", "--mode", "json", LIVE_PROMPT],
  });
  const log = shellQuote(options.log);
  const result = await guest.exec(
    `( PI_SKIP_VERSION_CHECK=1 ${command} ) < /dev/null > ${log} 2>&1; rc=$?; ` +
      `grep '"type":"message_end"' ${log} | tail -n 2; tail -n 5 ${log} | grep -v '"type":' ; exit $rc`,
    { signal: options.signal, deadlineMs: 10 * 60_000 },
  );
  const parsed = parseLiveOutput(result.output);
  if (result.exitCode !== 0 || !parsed) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_LIVE_CHECK_FAILED",
      `the live check with ${options.model} produced no generated response (exit ${result.exitCode}); ` +
        `log: ${options.log}. The refreshed candidate is selected but NOT live-ready`,
      {
        hint: "Read the log; after an expiry or authentication failure, rerun the same command to resynchronise the token.",
        details: {
          step: "live-check",
          logPath: options.log,
          exitCode: result.exitCode,
          tail: result.output.slice(-2000),
        },
      },
    );
  }
  return { model: options.model, ...parsed, expiresAt: options.expiresAt, logPath: options.log };
}

/** Finds the last assistant `message_end` with text and usage in Pi's JSON-mode output. */
export function parseLiveOutput(output: string): { response: string; usage: TokenUsage } | undefined {
  let found: { response: string; usage: TokenUsage } | undefined;
  for (const line of output.split("\n")) {
    if (!line.startsWith("{")) continue;
    let event: { type?: string; message?: Record<string, unknown> };
    try {
      event = JSON.parse(line) as typeof event;
    } catch {
      continue;
    }
    const message = event.message;
    if (event.type !== "message_end" || message?.role !== "assistant" || message.stopReason === "error") continue;
    const content = Array.isArray(message.content) ? (message.content as { type?: string; text?: string }[]) : [];
    const text = content
      .filter((part) => part.type === "text" && typeof part.text === "string")
      .map((part) => part.text)
      .join("")
      .trim();
    const usage = message.usage as Partial<TokenUsage> | undefined;
    if (text === "" || !usage || typeof usage.input !== "number" || typeof usage.output !== "number") continue;
    found = {
      response: text.slice(0, 200),
      usage: { input: usage.input, output: usage.output, totalTokens: usage.totalTokens ?? usage.input + usage.output },
    };
  }
  return found;
}

function stepFailed(step: string, output: string): ReviewSetupError {
  return new ReviewSetupError("REVIEW_SETUP_STEP_FAILED", `${step} failed: ${output.trim().slice(-2000)}`, {
    hint: "The candidate was refreshed but the guest's Pi was not pointed at the credential; rerun the command.",
    details: { step, output },
  });
}
