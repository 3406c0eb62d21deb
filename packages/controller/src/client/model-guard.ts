// A model's call, before it reaches a daemon: its host paths (the arguments marked as such, and
// the host paths its config's marked keys name) resolved to real paths (symlinks followed, so a
// link in the project cannot lead outside it), what it may never do refused (host-places.ts), what
// it may not do alone found (host-guard.ts), and the user asked through `confirm`, which only the
// user can answer. Without `confirm` (Pi without a UI) such a call is refused with the CLI command
// the user can run instead. A download's concerns are found by the daemon once it lists the
// guest's files; the client asks then and calls again with the user's answer, once.

import { createHash } from "node:crypto";
import { realpath } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import {
  HOST_REACH_KINDS,
  describeReaches,
  escapeControlChars,
  parseConfig,
  reachPath,
  readConfigText,
  shellQuote,
  type ConfigReach,
} from "@pi-sandbox/config";
import { hostPathArgs, type ActionSpec, type ArgumentReach } from "../actions/kit/define.js";
import type { TrustNote } from "../wire.js";
import { ControllerError, isControllerError } from "../errors.js";
import {
  confirmationRequired,
  describeConcerns,
  readConcern,
  type HostConcern,
  type HostGuard,
} from "../host-guard.js";
import { holdsHome, hostPlaces } from "../host-places.js";
import { configTrustKey, isConfigTrusted, resolveReaches, trustConfig } from "../state/config-trust.js";
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
  /**
   * Told of each answer: the user's yes or no, or the no of a call nobody could be asked about (the
   * ledger records them with the call, or with its refusal).
   */
  answered?: (note: TrustNote) => void;
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
    case "apply":
      return `pi-sandbox apply ${q(name)} --to ${q(args.to)}${args.since !== undefined ? ` --since ${q(args.since)}` : ""}${args.force === true ? " --force" : ""}${args.path !== undefined ? ` ${q(args.path)}` : ""}`;
    case "destroy":
      return `pi-sandbox destroy ${q(name)}${args.kind === "templates" ? " --template" : ""}`;
    default:
      return `pi-sandbox ${String(args.action)} ${q(name)} -c ${q(args.config)}`;
  }
}

/** What a model's config reaches on the host, resolved, with the key its trust is kept under. */
interface ConfigFacts {
  /** sha256 of the text the daemon must find unchanged. */
  sha256: string;
  /** The reaches with host paths resolved; empty when the config does not parse. */
  reaches: ConfigReach[];
  /** Their description, as the user is shown it. */
  declares: string[];
  /** {@link configTrustKey}. */
  trustKey: string;
}

async function readConfigFacts(path: string, env: NodeJS.ProcessEnv): Promise<ConfigFacts> {
  const { text, sourcePath } = await readConfigText(path);
  const sha256 = createHash("sha256").update(text).digest("hex");
  let reaches: ConfigReach[] = [];
  try {
    reaches = await resolveReaches(parseConfig(text, { sourcePath }), env);
  } catch {
    // The daemon reports what is wrong with it.
  }
  const declares = describeReaches(reaches);
  return { sha256, reaches, declares, trustKey: configTrustKey(path, sha256, declares) };
}

/** How many targets a prompt names one by one (every concern about the others is still listed). */
const TARGETS_SHOWN = 10;

/** Every line escaped: the command and the paths are the model's text, download paths the guest's. */
function printable(lines: readonly string[]): string {
  return lines.map((line) => escapeControlChars(line)).join("\n");
}

/** The user's answer, or the refusal a model gets where nobody can be asked. */
async function ask(
  policy: ModelPolicy,
  args: Record<string, unknown>,
  target: readonly string[],
  concerns: HostConcern[],
): Promise<void> {
  const command = cliEquivalent(args);
  // The resolved target first: a dialog cut short still shows where the call goes.
  const message = printable([
    ...target.slice(0, TARGETS_SHOWN).map((t) => `Target: ${t}`),
    ...(target.length > TARGETS_SHOWN ? [`Target: … and ${target.length - TARGETS_SHOWN} more host paths`] : []),
    "",
    "It needs your yes for (most severe first):",
    ...describeConcerns(concerns),
    "",
    `The model's call, as a command: ${command}`,
  ]);
  const asked = message.split("\n").filter(Boolean);
  if (!policy.confirm) {
    // Nobody could answer: a no all the same, which the ledger records as such.
    policy.answered?.({ asked, answer: "no", by: "nobody: Pi has no UI here to ask the user" });
    const refused = confirmationRequired(concerns);
    throw new ControllerError(refused.code, refused.message, {
      hint: `Pi has no UI here to ask the user. Tell the user what you need; they can run it themselves: ${escapeControlChars(command)}`,
      details: refused.details,
    });
  }
  const yes = await policy.confirm({ title: `Allow the model's sandbox ${String(args.action)}?`, message });
  policy.answered?.({ asked, answer: yes ? "yes" : "no", by: "the user, in Pi's dialog" });
  if (!yes) {
    throw new ControllerError(
      "CONTROLLER_USER_DECLINED",
      `the user declined ${escapeControlChars(command)}; nothing was done`,
      { hint: "Do not ask again for the same thing; ask the user how they want to proceed." },
    );
  }
}

/** A host path argument's values resolved through symlinks, written back into `args`. */
async function resolveArg(args: Record<string, unknown>, key: string): Promise<string[]> {
  const value = args[key];
  if (typeof value !== "string" && !Array.isArray(value)) return [];
  const real = await Promise.all((Array.isArray(value) ? value : [value]).map((p) => realHostPath(String(p))));
  args[key] = Array.isArray(value) ? real : real[0];
  return real;
}

/**
 * Resolves the host paths of a model's call in place, refuses what a model may never read, asks
 * the user about what it may not do alone, and returns the guard to send. What counts is derived
 * from the marks: the action's host-path arguments, its `irreversible` flag, and a config
 * argument's own marked keys. Throws CONTROLLER_HOST_PATH_REFUSED, CONTROLLER_CONFIRMATION_REQUIRED
 * (no UI) or CONTROLLER_USER_DECLINED.
 */
export async function guardModelCall(
  spec: Pick<ActionSpec, "args" | "irreversible">,
  args: Record<string, unknown>,
  policy: ModelPolicy,
  layout: StateLayout,
  env: NodeJS.ProcessEnv,
): Promise<GuardedCall> {
  const places = await hostPlaces(layout.root, env);
  const project = await realpath(policy.cwd);
  const guard: HostGuard = {
    project,
    ...(holdsHome(project, places) ? { noProject: true } : {}),
    ...(policy.strict ? { strict: true } : {}),
  };
  const concerns: HostConcern[] = [];
  const target: string[] = [];
  let config: string | undefined;
  for (const doc of hostPathArgs(spec)) {
    const real = await resolveArg(args, doc.name);
    target.push(...real);
    const reach = doc.reach as Exclude<ArgumentReach, "none">;
    if (reach.config && real.length === 1) config = real[0];
    // A download's target is written: the daemon judges its plan, once it knows the guest's files.
    if (reach.kind === "host-file-write") continue;
    for (const path of real) {
      const concern = readConcern(guard, path, places);
      if (concern) concerns.push(concern);
    }
  }
  if (spec.irreversible) {
    const entry = `${args.kind === "templates" ? "template" : "instance"} ${String(args.name)}`;
    target.push(entry);
    concerns.push({ kind: "irreversible", path: entry });
  }
  let trust: (() => Promise<void>) | undefined;
  if (config !== undefined && args.action !== "doctor") {
    let facts: ConfigFacts;
    try {
      facts = await readConfigFacts(config, env);
    } catch (error) {
      // Unreadable now is refused now: a file that appeared later would reach the daemon
      // unchecked. Outside the project, the user says yes before the model learns why.
      if (concerns.length > 0) await ask(policy, args, target, concerns);
      throw error;
    }
    guard.configSha256 = facts.sha256;
    // What the config puts in front of the guest is a host path the model reads, like an upload's.
    for (const reach of facts.reaches) {
      const path = reachPath(reach);
      if (path === undefined || !HOST_REACH_KINDS[reach.kind].toGuest) continue;
      const concern = readConcern(guard, path, places);
      if (concern) concerns.push({ ...concern, declares: [`${reach.key.join(".")} of the config`] });
    }
    if (facts.declares.length > 0 && !(await isConfigTrusted(layout, facts.trustKey))) {
      concerns.push({ kind: "untrusted-config", path: config, declares: facts.declares });
      const entry = { path: config, declares: facts.declares };
      trust = () => trustConfig(layout, facts.trustKey, entry);
    }
  }
  if (concerns.length > 0) {
    await ask(policy, args, target, concerns);
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
      await ask(policy, args, target, details.concerns);
      guard.approved = details.digest;
      return true;
    },
  };
}
