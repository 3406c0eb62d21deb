// A destroyed entry's ledger, kept after the destroy for as long as its config says (sandbox.yaml's
// `ledger.keepDestroyed`): moved out of the entry directory to `ledgers/<kind>/<name>.<time>/`,
// with, for a number of days, a `keep-until` file beside its files naming the time after which a
// later destroy removes it; with `off`, nothing is kept.
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { EntryKind, StateLayout } from "./layout.js";

/** The file in a kept ledger's directory that says until when it is kept (ISO time); none: forever. */
const KEEP_UNTIL_FILE = "keep-until";
const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * Moves the ledger of `name` out of its entry directory, to be kept `days` days (null or undefined:
 * forever; 0: not at all, left to be removed with the entry). Returns where it went; undefined when
 * it is not kept or there was none. Kept ledgers past their time are removed first.
 */
export async function keepDestroyedLedger(
  layout: StateLayout,
  kind: EntryKind,
  name: string,
  days: number | null | undefined,
  now = new Date(),
): Promise<string | undefined> {
  await pruneKeptLedgers(layout, kind, now);
  if (days === 0) return undefined;
  const stamp = now.toISOString().replace(/[-:.]/g, "");
  const to = layout.keptLedgerDir(kind, name, stamp);
  await mkdir(dirname(to), { recursive: true, mode: 0o700 });
  try {
    await rename(layout.ledgerDir(kind, name), to);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  if (days) {
    await writeFile(join(to, KEEP_UNTIL_FILE), `${new Date(now.getTime() + days * DAY_MS).toISOString()}\n`, {
      mode: 0o600,
    });
  }
  return to;
}

/** Removes the kept ledgers of `kind` whose time has passed; returns their directories. */
export async function pruneKeptLedgers(layout: StateLayout, kind: EntryKind, now = new Date()): Promise<string[]> {
  const root = layout.keptLedgersDir(kind);
  const removed: string[] = [];
  for (const dir of await readdir(root).catch(() => [] as string[])) {
    const until = await readFile(join(root, dir, KEEP_UNTIL_FILE), "utf8").catch(() => undefined);
    const at = until === undefined ? Number.NaN : Date.parse(until.trim());
    if (!(at <= now.getTime())) continue;
    await rm(join(root, dir), { recursive: true, force: true });
    removed.push(join(root, dir));
  }
  return removed;
}
