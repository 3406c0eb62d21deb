// `audit` reads an instance's ledger (what was done to it: actions with their caller and outcome,
// lifecycle, execs, file transfers), `audit-verify` checks its hash chain. Both read the files on
// the host (state/ledger.ts); a destroyed instance's ledger is kept and read the same way.
import { readdir } from "node:fs/promises";
import * as v from "valibot";
import { ControllerError } from "../errors.js";
import type { StateLayout } from "../state/layout.js";
import { LEDGER_KINDS, readLedger, verifyLedger, type LedgerEntry, type LedgerKind } from "../state/ledger.js";
import type { LedgerVerdict } from "../state/ledger.js";
import { entryWhat } from "../state/ledger-text.js";
import { readRecord } from "../state/records.js";
import { defineAction, UsageError } from "./kit/define.js";
import { actionSchema, arg, intOption, name, nameArg, positional } from "./kit/parts.js";
import { oneLine } from "./kit/text.js";

/** Entries `audit` returns without `since` or `last`. */
export const AUDIT_DEFAULT_LAST = 50;

/**
 * The ledger directory of `name`: its own while it exists, else the newest kept one of a destroyed
 * instance of that name (`destroyed` says when). CONTROLLER_NOT_FOUND when there is neither.
 */
async function ledgerOf(layout: StateLayout, instance: string): Promise<{ dir: string; destroyed?: string }> {
  if (await readRecord(layout, "instances", instance)) return { dir: layout.ledgerDir("instances", instance) };
  const keptRoot = layout.keptLedgersDir("instances");
  const kept = (await readdir(keptRoot).catch(() => [] as string[]))
    .filter((n) => n.startsWith(`${instance}.`) && /^[0-9TZ]+$/.test(n.slice(instance.length + 1)))
    .sort();
  const newest = kept.at(-1);
  if (!newest) {
    throw new ControllerError("CONTROLLER_NOT_FOUND", `no instance named ${instance}, and no ledger of one`, {
      hint: 'List instances with {"action":"list"}.',
      details: { name: instance },
    });
  }
  const stamp = newest.slice(instance.length + 1);
  return { dir: layout.keptLedgerDir("instances", instance, stamp), destroyed: stamp };
}

/** An entry as `audit` returns it. */
export type AuditEntry = LedgerEntry & {
  /**
   * Through a context: which machine's ledger holds it, `here` (this machine's ledger of the
   * context: what was sent from here, and refused here) or the context's name (what ran there).
   */
  machine?: string;
};

/** What `audit` returns. */
export interface AuditRead {
  name: string;
  /** Entries, oldest first (through a context, both machines' by time). */
  entries: AuditEntry[];
  /** The last entry's sequence number: `cursor` of the next read of a follower. */
  cursor: string;
  /** Always false: a follower reads again after a pause. */
  more: false;
  /** Set when the instance was destroyed: the time stamp its kept ledger is filed under. */
  destroyed?: string;
  /** Set through a context: its name (the entries of both machines are in `entries`). */
  context?: string;
}

const kindSchema = v.picklist(LEDGER_KINDS as LedgerKind[]);

/**
 * One entry as a line: sequence, time, kind and what happened (through a context, first the machine
 * whose ledger holds it), every guest or caller text escaped.
 */
export function entryLine(entry: AuditEntry): string {
  const machine = entry.machine === undefined ? "" : `${entry.machine.padEnd(8)}  `;
  return oneLine(
    `${machine}${String(entry.seq).padStart(6)}  ${entry.at}  ${entry.kind.padEnd(9)}  ${entryWhat(entry)}`,
  );
}

/** The first sequence number of a cursor (`12`, or `12:5` through a context: the far side's, then this machine's). */
export function cursorParts(cursor: string | undefined): [number, number] {
  const [far, here] = (cursor ?? "0:0").split(":");
  return [Number(far ?? 0), Number(here ?? 0)];
}

/** CONTROLLER_LEDGER_BROKEN for the ledger in `dir` (`what`: "the ledger of demo", …). */
export function ledgerBroken(
  what: string,
  dir: string,
  verdict: LedgerVerdict & { broken: NonNullable<LedgerVerdict["broken"]> },
  details: Record<string, unknown>,
): ControllerError {
  const b = verdict.broken;
  return new ControllerError(
    "CONTROLLER_LEDGER_BROKEN",
    `${what} is broken at ${b.file} line ${b.line} (entry ${b.seq}): ${b.reason}; the ${verdict.entries} entries before it hold`,
    {
      hint: `Something other than pi-sandbox wrote ${dir}. Keep a copy of it as it is; entries from ${b.seq} on cannot be trusted.`,
      details: { ...details, dir, ...b, entries: verdict.entries, lastHash: verdict.lastHash },
    },
  );
}

export const audit = defineAction({
  name: "audit",
  summary:
    "read an instance's ledger: every action with its caller and outcome, lifecycle, exec and file transfer the controller recorded (also of a destroyed instance)",
  args: [
    nameArg,
    arg("since", "string", false, "entries at or after this ISO time (e.g. 2026-12-05T10:00:00Z)"),
    // Names kinds of entries ("secret" among them); it reaches nothing.
    arg("kind", "string[]", false, `only these kinds: ${LEDGER_KINDS.join(", ")}`, "none"),
    arg("last", "integer", false, `only the last N entries (default ${AUDIT_DEFAULT_LAST} without since)`),
    arg("cursor", "string", false, "entries after this cursor (what the last read returned)"),
  ],
  route: "local",
  schema: actionSchema("audit", {
    name,
    since: v.optional(v.pipe(v.string(), v.isoTimestamp("must be an ISO time such as 2026-12-05T10:00:00Z"))),
    kind: v.optional(v.array(kindSchema)),
    last: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(100_000))),
    cursor: v.optional(v.pipe(v.string(), v.regex(/^\d+(:\d+)?$/, "must be a sequence number"))),
    follow: v.optional(v.boolean()),
  }),
  cli: {
    usage: "audit <name> [-f] [--since T] [--kind K]   what was done to an instance (audit verify: check it)",
    options: {
      follow: { type: "boolean", short: "f", description: "print entries as they are written, until Ctrl-C" },
      since: { type: "string", value: "time", description: "entries at or after this ISO time" },
      kind: {
        type: "string",
        multiple: true,
        value: "kind",
        description: `only this kind (repeatable): ${LEDGER_KINDS.join(", ")}`,
      },
      last: {
        type: "string",
        short: "n",
        value: "N",
        description: `the last N entries (default ${AUDIT_DEFAULT_LAST})`,
      },
    },
    toAction: (input) => {
      const kinds = input.values.kind as string[] | undefined;
      const unknown = kinds?.find((k) => !(LEDGER_KINDS as readonly string[]).includes(k));
      if (unknown) throw new UsageError(`--kind ${unknown} is not a kind; choose from ${LEDGER_KINDS.join(", ")}`);
      const last = intOption(input.values.last, "--last");
      return {
        action: "audit",
        name: positional(input, 0, "a name", "audit"),
        ...(typeof input.values.since === "string" ? { since: input.values.since } : {}),
        ...(kinds ? { kind: kinds } : {}),
        ...(last !== undefined ? { last } : {}),
        ...(input.values.follow === true ? { follow: true } : {}),
      };
    },
    run: (input) => (input.values.follow === true ? { kind: "follow-logs" } : undefined),
  },
  run: async (args, ctx): Promise<AuditRead> => {
    const { dir, destroyed } = await ledgerOf(ctx.layout, args.name);
    const [after] = cursorParts(args.cursor);
    const read = readLedger(dir, { ...(args.since ? { since: new Date(args.since) } : {}), after });
    const kinds = args.kind;
    let entries = kinds ? read.filter((e) => kinds.includes(e.kind)) : read;
    const last = args.last ?? (args.since === undefined && args.cursor === undefined ? AUDIT_DEFAULT_LAST : undefined);
    if (last !== undefined) entries = entries.slice(-last);
    // Past entries of other kinds too: a follower never reads them again.
    const newest = read.at(-1)?.seq ?? after;
    return {
      name: args.name,
      entries,
      cursor: String(newest),
      more: false,
      ...(destroyed ? { destroyed } : {}),
    };
  },
  formatText: (result) => result.entries.map((e) => `${entryLine(e)}\n`).join(""),
  brief: (result) => `${result.entries.length} entries`,
});

/** What `audit-verify` found. */
export interface AuditVerdict {
  name: string;
  /** Every entry's hash and link hold (a broken chain is CONTROLLER_LEDGER_BROKEN instead). */
  ok: true;
  entries: number;
  files: number;
  /** The last entry's hash: keep it elsewhere to notice a ledger cut short or rewritten whole later. */
  lastHash: string;
  destroyed?: string;
  /** Through a context: its name, and what this machine's ledger of it holds (all instances). */
  context?: string;
  here?: { entries: number; files: number; lastHash: string; dir: string };
}

export const auditVerify = defineAction({
  name: "audit-verify",
  summary:
    "check an instance's ledger: every entry's hash and its link to the one before; says where the chain breaks (an entry changed, inserted or deleted)",
  args: [nameArg],
  route: "local",
  schema: actionSchema("audit-verify", { name }),
  cli: {
    usage: "audit verify <name>                  check the ledger's hash chain",
    toAction: (input) => ({ action: "audit-verify", name: positional(input, 0, "a name", "audit verify") }),
  },
  run: async (args, ctx): Promise<AuditVerdict> => {
    const { dir, destroyed } = await ledgerOf(ctx.layout, args.name);
    const verdict = verifyLedger(dir);
    if (verdict.broken)
      throw ledgerBroken(
        `the ledger of ${args.name}`,
        dir,
        { ...verdict, broken: verdict.broken },
        { name: args.name },
      );
    return {
      name: args.name,
      ok: true,
      entries: verdict.entries,
      files: verdict.files,
      lastHash: verdict.lastHash,
      ...(destroyed ? { destroyed } : {}),
    };
  },
  formatText: (result) =>
    [
      result.files > 0 || !result.here
        ? `the ledger of ${oneLine(result.name)}${result.context ? ` on context ${oneLine(result.context)}` : ""} holds: ${result.entries} entries in ${result.files} file(s); last hash ${result.lastHash}\n`
        : `context ${oneLine(result.context ?? "")} has no ledger of ${oneLine(result.name)}\n`,
      result.here
        ? `this machine's ledger of context ${oneLine(result.context ?? "")} holds: ${result.here.entries} entries in ${result.here.files} file(s); last hash ${result.here.lastHash}\n`
        : "",
    ].join(""),
  brief: () => "ledger holds",
});
