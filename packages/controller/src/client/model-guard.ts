// A model's call, before it reaches a daemon: its host paths resolved to real paths (symlinks
// followed, so a link in the project cannot lead outside it), what it may not do alone found
// (host-guard.ts), and the user asked through `confirm`, which only the user can answer. Without
// `confirm` (Pi without a UI) such a call is refused with the CLI command the user can run instead.
// A download's concerns are found by the daemon once it lists the guest's files; the client asks
// then and calls again with the user's answer, once.

import { createHash } from "node:crypto";
import { realpath } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { parseConfig, readConfigText, shellQuote, type SandboxConfig } from "@pi-sandbox/config";
import { ControllerError, isControllerError } from "../errors.js";
import {
  confirmationRequired,
  describeConcerns,
  readConcern,
  type HostConcern,
  type HostGuard,
} from "../host-guard.js";
import { configDeclares, isConfigTrusted, trustConfig } from "../state/config-trust.js";
import type { StateLayout } from "../state/layout.js";

/** What the user is asked: the exact action and every resolved path. */
export interface ConfirmRequest {
  /** One line, e.g. "Allow the model's sandbox download?". */
  title: string;
  /** The action as the CLI would run it, and one line per path with why it needs a yes. */
  message: string;
}

/** Asks the user, never the model; resolves true for yes. */
export type ConfirmFn = (request: ConfirmRequest) => Promise<boolean>;

/** How a model's call is limited. */
export interface ModelPolicy {
  /** The project directory (Pi's cwd), as given. */
  cwd: string;
  /** Every host path needs a yes (Pi is attached to an instance). */
  strict: boolean;
  /** The user's prompt; absent where there is no UI. */
  confirm?: ConfirmFn;
}

/** A model's call checked before it is sent. */
export interface GuardedCall {
  /** Sent beside the action. */
  guard: HostGuard;
  /** Asks the user about what the daemon refused (a download's plan); false when not asked again. */
  askAgain(error: unknown): Promise<boolean>;
}

/** `path` with symlinks resolved as far as it exists; the rest appended (a new file's name). */
async function realPathOf(path: string): Promise<string> {
  try {
    return await realpath(path);
  } catch (error) {
    const parent = dirname(path);
    if ((error as NodeJS.ErrnoException).code !== "ENOENT" || parent === path) throw error;
    return join(await realPathOf(parent), basename(path));
  }
}

/** `realPathOf` keeping a trailing `/` (the copy then wants an existing directory). */
async function realHostPath(path: string): Promise<string> {
  const real = await realPathOf(path);
  return path.endsWith("/") && !real.endsWith("/") ? `${real}/` : real;
}

/** The pi-sandbox command that does what the call asks, for the user to run themselves. */
export function cliEquivalent(args: Record<string, unknown>): string {
  const q = (value: unknown) => shellQuote(String(value));
  const paths = (value: unknown) => (Array.isArray(value) ? value : [value]).map(String);
  const name = String(args.name ?? "");
  switch (args.action) {
    case "upload":
      return `pi-sandbox cp ${paths(args.from).map(q).join(" ")} ${q(`${name}:${String(args.to)}`)}`;
    case "download":
      return `pi-sandbox cp ${paths(args.from)
        .map((p) => q(`${name}:${p}`))
        .join(" ")} ${q(args.to)}`;
    case "doctor":
      return `pi-sandbox doctor -c ${q(args.config)}`;
    default:
      return `pi-sandbox ${String(args.action)} ${q(name)} -c ${q(args.config)}`;
  }
}

/** A config's text, digest and declared secrets and mounts; `declares` is empty when it does not parse. */
async function readConfigFacts(path: string): Promise<{ sha256: string; declares: string[] }> {
  const { text, sourcePath } = await readConfigText(path);
  const sha256 = createHash("sha256").update(text).digest("hex");
  let config: SandboxConfig;
  try {
    config = parseConfig(text, { sourcePath });
  } catch {
    return { sha256, declares: [] }; // the daemon reports what is wrong with it
  }
  return { sha256, declares: configDeclares(config) };
}

/** The user's answer, or the refusal a model gets where nobody can be asked. */
async function ask(policy: ModelPolicy, args: Record<string, unknown>, concerns: HostConcern[]): Promise<void> {
  const command = cliEquivalent(args);
  if (!policy.confirm) {
    const refused = confirmationRequired(concerns);
    throw new ControllerError(refused.code, refused.message, {
      hint: `Pi has no UI here to ask the user. Tell the user what you need; they can run it themselves: ${command}`,
      details: refused.details,
    });
  }
  const message = [`The model asks to run: ${command}`, "", "It needs your yes for:", ...describeConcerns(concerns)];
  const yes = await policy.confirm({
    title: `Allow the model's sandbox ${String(args.action)}?`,
    message: message.join("\n"),
  });
  if (!yes) {
    throw new ControllerError("CONTROLLER_USER_DECLINED", `the user declined ${command}; nothing was done`, {
      hint: "Do not ask again for the same thing; ask the user how they want to proceed.",
    });
  }
}

/**
 * Resolves the host paths of a model's call in place, asks the user about what it may not do
 * alone, and returns the guard to send. Throws CONTROLLER_CONFIRMATION_REQUIRED (no UI) or
 * CONTROLLER_USER_DECLINED.
 */
export async function guardModelCall(
  hostPaths: readonly string[],
  args: Record<string, unknown>,
  policy: ModelPolicy,
  layout: StateLayout,
): Promise<GuardedCall> {
  const guard: HostGuard = { project: await realpath(policy.cwd), ...(policy.strict ? { strict: true } : {}) };
  const concerns: HostConcern[] = [];
  // A download's target is written: the daemon judges its plan. Everything else here is read.
  const reads = args.action === "download" ? ["config"] : [...hostPaths, "config"];
  for (const key of [...hostPaths, "config"]) {
    const value = args[key];
    if (typeof value !== "string" && !Array.isArray(value)) continue;
    const real = await Promise.all((Array.isArray(value) ? value : [value]).map((p) => realHostPath(String(p))));
    args[key] = Array.isArray(value) ? real : real[0];
    if (!reads.includes(key)) continue;
    for (const path of real) {
      const concern = readConcern(guard, path);
      if (concern) concerns.push(concern);
    }
  }
  let trust: (() => Promise<void>) | undefined;
  if (typeof args.config === "string" && args.action !== "doctor") {
    let facts: Awaited<ReturnType<typeof readConfigFacts>>;
    try {
      facts = await readConfigFacts(args.config);
    } catch (error) {
      // Unreadable now is refused now: a file that appeared later would reach the daemon
      // unchecked. Outside the project, the user says yes before the model learns why.
      if (concerns.length > 0) await ask(policy, args, concerns);
      throw error;
    }
    guard.configSha256 = facts.sha256;
    if (facts.declares.length > 0 && !(await isConfigTrusted(layout, facts.sha256))) {
      concerns.push({ kind: "untrusted-config", path: args.config, declares: facts.declares });
      const entry = { path: args.config, declares: facts.declares };
      trust = () => trustConfig(layout, facts.sha256, entry);
    }
  }
  if (concerns.length > 0) {
    await ask(policy, args, concerns);
    await trust?.();
  }
  let asked = false;
  return {
    guard,
    async askAgain(error) {
      if (asked || !isControllerError(error) || error.code !== "CONTROLLER_CONFIRMATION_REQUIRED") return false;
      asked = true;
      const details = error.details as { concerns?: HostConcern[]; digest?: string } | undefined;
      if (!details?.concerns || !details.digest) return false;
      await ask(policy, args, details.concerns);
      guard.approved = details.digest;
      return true;
    },
  };
}
