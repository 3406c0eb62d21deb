// An instance's ledger for the page's timeline: read through the `audit` action (the ledger's host
// files, so a suspended instance is never woken), the last entries first, then each entry written
// after them. Each goes out in words (audit's own), its control characters escaped; the page adds
// it as text, newest first.
import { setTimeout } from "node:timers/promises";
import { escapeControlChars } from "@pi-sandbox/config";
import { LEDGER_KINDS, type LedgerEntry } from "../state/ledger.js";
import { entryWhat } from "../state/ledger-text.js";
import { errorJson, type CallFn } from "./snapshot.js";

/** How often the ledger is read again, in ms. */
export const TIMELINE_POLL_MS = 1_000;
/** Entries the timeline starts with. */
export const TIMELINE_FIRST = 200;

/** An entry as `audit` returns it: through a context, with the machine whose ledger holds it. */
type AuditEntry = LedgerEntry & { machine?: string };

/** One entry as the page shows it. */
export interface TimelineEntry {
  seq: number;
  at: string;
  kind: string;
  /** What happened, in words, escaped. */
  text: string;
  /**
   * Through a context: the machine whose ledger holds it, `here` or the context's name (each keeps
   * its own sequence numbers).
   */
  machine?: string;
}

/** What a follower reports. */
export type TimelineEvent =
  /** First: the kinds the page may filter by. */
  | { type: "kinds"; kinds: readonly string[] }
  | { type: "entries"; entries: TimelineEntry[] }
  | { type: "failure"; error: ReturnType<typeof errorJson> };

/** The page's form of an entry. */
export function timelineEntry(entry: AuditEntry): TimelineEntry {
  return {
    seq: entry.seq,
    at: entry.at,
    kind: entry.kind,
    text: escapeControlChars(entryWhat(entry)),
    ...(entry.machine !== undefined ? { machine: escapeControlChars(entry.machine) } : {}),
  };
}

/**
 * Follows the ledger of `target.name` (only `target.kinds`, when given) until `signal` aborts: the
 * kinds there are, the last entries, then each batch written since, to `emit`. A failed read (no such instance,
 * an unknown kind) is reported once and retried later.
 */
export async function followLedger(
  call: CallFn,
  target: { name: string; kinds?: readonly string[] },
  emit: (event: TimelineEvent) => void,
  signal: AbortSignal,
  options: { pollMs?: number } = {},
): Promise<void> {
  const pollMs = options.pollMs ?? TIMELINE_POLL_MS;
  const base = { action: "audit", name: target.name, ...(target.kinds?.length ? { kind: [...target.kinds] } : {}) };
  let cursor: string | undefined;
  let failed = false;
  emit({ type: "kinds", kinds: LEDGER_KINDS });
  while (!signal.aborted) {
    try {
      const read = (await call(cursor === undefined ? { ...base, last: TIMELINE_FIRST } : { ...base, cursor })) as {
        entries: AuditEntry[];
        cursor: string;
      };
      if (read.entries.length > 0) emit({ type: "entries", entries: read.entries.map(timelineEntry) });
      cursor = read.cursor;
      failed = false;
    } catch (error) {
      if (!failed) emit({ type: "failure", error: errorJson(error) });
      failed = true;
    }
    await setTimeout(failed ? pollMs * 4 : pollMs, undefined, { signal }).catch(() => undefined);
  }
}
