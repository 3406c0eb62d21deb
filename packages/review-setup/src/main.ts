// review-setup's main: parses the command line, runs the setup, prints the result.
import { isCodedError } from "@pi-sandbox/config";
import { escapeControlChars } from "@pi-sandbox/controller/client";
import { access } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { parseCommandLine, USAGE } from "./args.js";
import { checkPiVersion } from "./pi-version.js";
import type { ControllerOptions } from "./guest.js";
import { runReviewSetup, type ReviewSetupOptions, type ReviewSetupResult } from "./refresh.js";

/** Where the CLI writes and what it reads; injectable for tests. */
export interface CliIo {
  /** Result lines. */
  stdout: (text: string) => void;
  /** Progress and errors. */
  stderr: (text: string) => void;
  /** Environment (state root, host Pi login). */
  env: NodeJS.ProcessEnv;
  /** Working directory (default repo, relative `--config`). */
  cwd: string;
  /** Ends the run. */
  signal?: AbortSignal;
  /** Asks the user a question and resolves with the answer (a terminal only); absent: no one to ask. */
  ask?: (question: string) => Promise<string>;
  /** Extra library options for tests (install/build commands). */
  overrides?: Partial<ReviewSetupOptions>;
}

/** `sandbox:setup` entry: runs, prints progress and a summary, returns the exit code. */
export async function main(argv: readonly string[], raw: CliIo): Promise<number> {
  // Guest text (progress, error messages, log tails) never reaches the terminal raw.
  const io: CliIo = {
    ...raw,
    stdout: (text) => raw.stdout(escapeControlChars(text, { multiline: true })),
    stderr: (text) => raw.stderr(escapeControlChars(text, { multiline: true })),
  };
  let args;
  try {
    args = parseCommandLine(argv);
  } catch (error) {
    printError(io, error);
    return 2;
  }
  if (args.help) {
    io.stdout(USAGE);
    return 0;
  }
  if (args.checkPi) {
    const repo = await checkoutRoot(resolve(io.cwd, args.repo ?? "."));
    const check = await checkPiVersion({ repo, env: io.env, ...(io.signal ? { signal: io.signal } : {}) });
    (check.exitCode === 2 ? io.stderr : io.stdout)(`${check.message}\n`);
    return check.exitCode;
  }
  const controller: ControllerOptions = { env: io.env, cwd: io.cwd };
  try {
    const result = await runReviewSetup({
      ...args,
      controller,
      hostEnv: io.env,
      signal: io.signal,
      ...(raw.ask ? { confirm: async (question: string) => /^y(es)?$/i.test((await raw.ask!(question)).trim()) } : {}),
      onProgress: (event) => {
        const mark = { start: "…", done: "✓", skip: "-", info: " " }[event.status];
        io.stderr(`[${event.step}] ${mark} ${event.message}\n`);
      },
      ...io.overrides,
    });
    io.stdout(formatResult(result));
    return 0;
  } catch (error) {
    printError(io, error);
    return 1;
  }
}

/** The nearest directory at or above `dir` holding package-lock.json (else `dir`). */
async function checkoutRoot(dir: string): Promise<string> {
  for (let at = dir; ; at = dirname(at)) {
    if (
      await access(join(at, "package-lock.json")).then(
        () => true,
        () => false,
      )
    )
      return at;
    if (dirname(at) === at) return dir;
  }
}

/** The summary printed after a successful refresh. */
export function formatResult(result: ReviewSetupResult): string {
  const headline = {
    "live-ready": `Review candidate ${result.candidateId} is current in ${result.instance} and LIVE-READY.`,
    "local-model-server": `Review candidate ${result.candidateId} is current in ${result.instance}, on the host's model server.`,
    "offline-snapshot": `Review candidate ${result.candidateId} is current in ${result.instance}: OFFLINE SNAPSHOT (not live-ready; pass --live-model provider/model for a live check).`,
  }[result.mode];
  const lines = [
    headline,
    `  snapshot: ${result.files} files from ${result.vcs}, ${result.bytes} bytes, sha256 ${result.sha256} (verified in the guest)`,
    `  current:  ${result.currentPath} -> ${result.candidatePath}` +
      (result.previousId ? ` (previous: ${result.previousId})` : ""),
    `  agent:    ${result.agentDir} (private, isolated)`,
    result.scope === "pi"
      ? "  scope:    pi (installed and built only what the launch command loads; --scope full for the whole workspace)"
      : "  scope:    full (the whole workspace installed and built)",
  ];
  if (result.live) {
    const { usage, expiresAt } = result.live;
    lines.push(
      `  live:     ${result.live.model} answered "${result.live.response}" using ${usage.input} input + ${usage.output} output = ${usage.totalTokens} tokens`,
      expiresAt === undefined
        ? "  token:    an API key (no expiry)"
        : `  token:    expires ${new Date(expiresAt).toISOString()}; the guest cannot refresh it, rerun this command after expiry`,
    );
  }
  if (result.modelServer) {
    const { hostUrl, guestUrl, ids, model } = result.modelServer;
    lines.push(
      `  models:   ${guestUrl} (host ${hostUrl}) serves ${ids.length}: ${ids.slice(0, 8).join(", ")}${ids.length > 8 ? ", …" : ""}`,
      `            the launch command selects ${model}; /model lists what the server serves when it opens`,
    );
  }
  for (const note of result.notes) lines.push(`  note:     ${note}`);
  lines.push(
    "",
    "Launch Pi in the guest (e.g. in a guest terminal: npx pi-sandbox ssh " + result.instance + "):",
    "",
    `  ${result.launchCommand}`,
    "",
  );
  return lines.join("\n");
}

function printError(io: CliIo, error: unknown): void {
  if (isCodedError(error)) {
    io.stderr(`error ${error.code}: ${error.message}\n`);
    const tail = (error.details as { tail?: unknown } | undefined)?.tail;
    if (typeof tail === "string" && tail.trim() !== "")
      io.stderr(`--- last lines of the log ---\n${tail.trimEnd()}\n---\n`);
    if (error.hint) io.stderr(`hint: ${error.hint}\n`);
    return;
  }
  if ((error as Error)?.name === "AbortError") {
    io.stderr("interrupted\n");
    return;
  }
  io.stderr(`unexpected error: ${(error as Error)?.stack ?? String(error)}\n`);
}
