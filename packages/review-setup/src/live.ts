// Guest side of live mode: the credential in the private agent dir, then one real response.
import type { GuestCredential } from "./credentials.js";
import { ReviewSetupError } from "./errors.js";
import { shellQuote, type GuestSession } from "./guest.js";
import { launchCommand } from "./launch.js";
import type { ReviewLayout } from "./layout.js";

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

/**
 * Stores the credential in `<agentDir>/auth.json` (0600, directory 0700), keeping other
 * providers' guest credentials, and drops a guest models.json override of that provider so the
 * candidate uses the provider's normal backend.
 */
export async function storeGuestCredential(
  guest: GuestSession,
  layout: ReviewLayout,
  credential: GuestCredential,
  signal?: AbortSignal,
): Promise<void> {
  const dir = shellQuote(layout.agentDir);
  const auth = `${layout.agentDir}/auth.json`;
  // Create the file 0600 before any secret is written to it.
  const prepared = await guest.exec(
    `umask 077 && mkdir -p ${dir} && chmod 700 ${dir} && { [ -s ${shellQuote(auth)} ] || printf '{}' > ${shellQuote(auth)}; } && chmod 600 ${shellQuote(auth)}`,
    { signal },
  );
  if (prepared.exitCode !== 0) throw stepFailed("credentials", prepared.output);
  let existing: Record<string, unknown> = {};
  try {
    existing = JSON.parse(await guest.read(auth, { signal })) as Record<string, unknown>;
  } catch {
    existing = {};
  }
  existing[credential.provider] = credential.entry;
  await guest.write(auth, JSON.stringify(existing, null, 2) + "\n", { signal });
  const models = `${layout.agentDir}/models.json`;
  const dropOverride =
    `const fs=require("fs");const [f,p]=process.argv.slice(1);const j=JSON.parse(fs.readFileSync(f,"utf8"));` +
    `if(j.providers&&j.providers[p]){delete j.providers[p];fs.writeFileSync(f,JSON.stringify(j,null,2))}`;
  const fixed = await guest.exec(
    `chmod 600 ${shellQuote(auth)} && stat -c %a ${shellQuote(auth)} && ` +
      `{ [ ! -f ${shellQuote(models)} ] || node -e ${shellQuote(dropOverride)} ${shellQuote(models)} ${shellQuote(credential.provider)}; }`,
    { signal },
  );
  if (fixed.exitCode !== 0 || fixed.output.trim().split("\n")[0] !== "600")
    throw stepFailed("credentials", fixed.output);
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
    hint: "The candidate was refreshed but no credential is stored; rerun the command.",
    details: { step, output },
  });
}
