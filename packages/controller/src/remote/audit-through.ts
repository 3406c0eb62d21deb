// `audit` and `audit verify` of an instance on another machine read two ledgers: the far side's
// (what ran there, with the caller this machine reported) and this machine's of the context (what
// was sent from here, and the model's calls refused here, which never got there). `audit` merges
// them by time, each entry saying which machine recorded it; `audit verify` checks both chains.
import {
  AUDIT_DEFAULT_LAST,
  cursorParts,
  ledgerBroken,
  type AuditEntry,
  type AuditRead,
  type AuditVerdict,
} from "../actions/audit.js";
import { ControllerError, isControllerError } from "../errors.js";
import { StateLayout } from "../state/layout.js";
import { readLedger, verifyLedger, type LedgerKind } from "../state/ledger.js";

/** Where this machine's entries are said to be from. */
export const HERE = "here";

/**
 * The far side's answer to `args`, or undefined when it has no such instance nor a ledger of one
 * while this machine has entries of it (a create refused here, say).
 */
async function farOrNone<T>(send: () => Promise<unknown>, ownEntries: number, context: string): Promise<T | undefined> {
  try {
    return (await send()) as T;
  } catch (error) {
    if (ownEntries > 0 && isControllerError(error, "CONTROLLER_NOT_FOUND")) return undefined;
    // Said as the other machine's: this machine's ledger of the context is another one.
    if (isControllerError(error, "CONTROLLER_LEDGER_BROKEN")) {
      throw new ControllerError("CONTROLLER_LEDGER_BROKEN", `on context ${context}, ${error.message}`, {
        ...(error.hint ? { hint: `${error.hint} (That directory is on the machine of context ${context}.)` } : {}),
        details: { ...error.details, context },
      });
    }
    throw error;
  }
}

/** `audit`/`audit-verify` of `args.name` through `context`; `send` asks the far side. */
export async function auditThroughContext(
  action: "audit" | "audit-verify",
  args: Record<string, unknown>,
  context: string,
  env: NodeJS.ProcessEnv,
  send: (args: Record<string, unknown>) => Promise<unknown>,
): Promise<AuditRead | AuditVerdict> {
  const name = String(args.name);
  const dir = StateLayout.fromEnv(env).contextLedgerDir(context);
  if (action === "audit-verify") {
    const verdict = verifyLedger(dir);
    if (verdict.broken) {
      throw ledgerBroken(
        `this machine's ledger of context ${context}`,
        dir,
        { ...verdict, broken: verdict.broken },
        { context },
      );
    }
    const own = readLedger(dir).filter((e) => e.data.name === name).length;
    const far = await farOrNone<AuditVerdict>(() => send(args), own, context);
    return {
      ...(far ?? { ok: true, entries: 0, files: 0, lastHash: "" }),
      name,
      context,
      here: { entries: verdict.entries, files: verdict.files, lastHash: verdict.lastHash, dir },
    };
  }
  const [farAfter, hereAfter] = cursorParts(args.cursor as string | undefined);
  const kinds = args.kind as LedgerKind[] | undefined;
  const read = readLedger(dir, {
    ...(typeof args.since === "string" ? { since: new Date(args.since) } : {}),
    after: hereAfter,
  });
  const own: AuditEntry[] = read
    .filter((e) => e.data.name === name && (!kinds || kinds.includes(e.kind)))
    .map((e) => ({ ...e, machine: HERE }));
  const { cursor: _cursor, ...rest } = args;
  const far = await farOrNone<AuditRead>(
    () => send(args.cursor === undefined ? rest : { ...rest, cursor: String(farAfter) }),
    own.length,
    context,
  );
  let entries = [...(far?.entries ?? []).map((e) => ({ ...e, machine: context })), ...own].sort((a, b) =>
    a.at < b.at ? -1 : a.at > b.at ? 1 : 0,
  );
  const last =
    (args.last as number | undefined) ??
    (args.since === undefined && args.cursor === undefined ? AUDIT_DEFAULT_LAST : undefined);
  if (last !== undefined) entries = entries.slice(-last);
  return {
    name,
    entries,
    // Both machines' positions: the far side's, then this machine's (past other instances' entries too).
    cursor: `${far?.cursor ?? farAfter}:${read.at(-1)?.seq ?? hereAfter}`,
    more: false,
    context,
    ...(far?.destroyed ? { destroyed: far.destroyed } : {}),
  };
}
