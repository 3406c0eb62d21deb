// Schema and documentation pieces shared by the action modules.

import * as v from "valibot";
import { LIMITS, formatDuration, hasControlChars, parseDuration } from "@pi-sandbox/config";
import { UsageError, type ArgumentDoc, type ArgumentReach, type CliInput } from "./define.js";

/** Instance/template names are checked after the schema, so a bad one gets CONTROLLER_INVALID_NAME. */
export const name = v.string();
/** A non-empty string. */
export const text = v.pipe(v.string(), v.minLength(1));
/** A wait in ms within the exec limits. */
export const waitMs = v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(LIMITS.execWaitMaxMs));
/** A TCP port. */
export const port = v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(65535));
/** A namespace. */
export const kind = v.picklist(["instances", "templates"]);
/**
 * A label that is printed (a preview title, folder or URL): no control characters, the same rule
 * as the guest .sandbox.yaml's, since a model may pass terminal escape sequences.
 */
export const label = v.pipe(
  v.string(),
  v.check((value: string) => !hasControlChars(value), "must not contain control characters (such as ESC or BEL)"),
);
/** Longer text (a preview description): line breaks and tabs, but no other control characters. */
export const prose = v.pipe(
  v.string(),
  v.check(
    (value: string) => !hasControlChars(value, { multiline: true }),
    "must not contain control characters (such as ESC or BEL) other than line breaks and tabs",
  ),
);
/** A preview link. */
export const link = v.strictObject({ url: label, title: label, description: v.optional(prose) });
/** A folder of preview links. */
export const folder = v.strictObject({ folder: label, links: v.array(link) });

/** The strict object schema of one action: `{action: "<name>", ...entries}`. */
export function actionSchema<const A extends string, E extends v.ObjectEntries>(
  actionName: A,
  entries: E,
): v.StrictObjectSchema<{ action: v.LiteralSchema<A, undefined> } & E, undefined> {
  return v.strictObject({ action: v.literal(actionName), ...entries });
}

/** One documented argument; `reach` marks how it reaches the host (see ArgumentDoc). */
export const arg = (
  argName: string,
  type: string,
  required: boolean,
  doc: string,
  reach?: ArgumentReach,
): ArgumentDoc => ({ name: argName, type, required, text: doc, ...(reach ? { reach } : {}) });

/** The mark of an argument that is a guest path (it only sounds like a host path). */
export const GUEST_PATH: ArgumentReach = "none";
/** The mark of a `config` argument: a host sandbox.yaml, read, whose own marked keys reach the host. */
export const CONFIG_FILE: ArgumentReach = { kind: "host-file-read", config: true };

/** The `name` argument of instance actions. */
export const nameArg = arg("name", "string", true, "instance name: a lowercase letter, then up to 39 of a-z, 0-9, '-'");
/** The `kind` argument. */
export const kindArg = arg("kind", '"instances"|"templates"', false, "default instances");
/** The `timeoutMs` argument of exec waits. */
export const timeoutArg = arg(
  "timeoutMs",
  "integer",
  false,
  `how long to wait, 0-${LIMITS.execWaitMaxMs} ms, default ${LIMITS.execWaitDefaultMs}; only the wait ends, the command keeps running`,
);

const IDLE_RANGE = `between ${formatDuration(LIMITS.idleSuspendMinMs)} and ${formatDuration(LIMITS.idleSuspendMaxMs)}`;

/** `--idle-suspend` as ms: 0 for "off", else the duration; undefined when not given. */
export function idleSuspendMs(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  return value.trim() === "off" ? 0 : parseDuration(value);
}

/** `idleSuspend`: "off" or a duration within `idle.suspendAfter`'s limits. */
export const idleSuspend = v.pipe(
  v.string(),
  v.check((value: string) => {
    const ms = idleSuspendMs(value);
    return ms === 0 || (ms !== undefined && ms >= LIMITS.idleSuspendMinMs && ms <= LIMITS.idleSuspendMaxMs);
  }, `must be "off" or a duration such as 15m, 90s or 1h30m, ${IDLE_RANGE}`),
);

/** The `idleSuspend` argument of create and start. */
export const idleSuspendArg = arg(
  "idleSuspend",
  "string",
  false,
  `suspend the instance after this long unused (no preview request or WebSocket, action, terminal, running command or guest CPU use), e.g. "15m", ${IDLE_RANGE}; its next preview request or action resumes it. "off" turns it off. Replaces the config's idle.suspendAfter for this instance, for good`,
);

/** The `--idle-suspend` option of create and start. */
export const idleSuspendOption = {
  type: "string",
  value: "duration",
  description: 'suspend after this long unused (15m, 90s, 1h30m; "off"); the next preview request or action resumes it',
} as const;

/** The `i`-th positional of a subcommand, or a usage error naming `what`. */
export function positional(input: CliInput, i: number, what: string, command: string): string {
  const value = input.positionals[i];
  if (value === undefined) throw new UsageError(`${command} needs ${what}`);
  return value;
}

/** An integer option value, or a usage error. */
export function intOption(value: string | boolean | string[] | undefined, what: string): number | undefined {
  if (typeof value !== "string") return undefined;
  const n = Number(value);
  if (!Number.isInteger(n)) throw new UsageError(`${what} must be an integer; got ${value}`);
  return n;
}

/** `{kind: "templates"}` when `--template`/`--templates` was given. */
export function kindOption(input: CliInput): { kind?: "templates" } {
  return input.values.template || input.values.templates ? { kind: "templates" } : {};
}
