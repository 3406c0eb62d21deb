// The dashboard's record in the state root (dashboard.json): who runs it, on which port, and the
// key its links' tokens are signed with. One dashboard per state root: it creates the file
// exclusively, and a record whose process is gone is stale and replaced.
import { randomBytes } from "node:crypto";
import { open, readFile, unlink } from "node:fs/promises";
import { writeJsonAtomic } from "@pi-sandbox/config";
import { isAlive, selfIdentity } from "@pi-sandbox/vm/host";
import type { StateLayout } from "../state/layout.js";

/** What dashboard.json holds. */
export interface DashboardRecord {
  /** The dashboard process. */
  pid: number;
  /** Its start time in clock ticks since boot (/proc), so a reused pid is not taken for it. */
  startTime?: string;
  /** Its port on 127.0.0.1; absent while it is starting. */
  port?: number;
  /** Hex key that signs the tokens of its links (HMAC-SHA256). */
  key: string;
}

/** The record, or `undefined` when there is none or it is not one. */
export async function readDashboardRecord(layout: StateLayout): Promise<DashboardRecord | undefined> {
  try {
    const value = JSON.parse(await readFile(layout.dashboardFile(), "utf8")) as Partial<DashboardRecord>;
    if (typeof value.pid !== "number" || typeof value.key !== "string") return undefined;
    return value as DashboardRecord;
  } catch {
    return undefined;
  }
}

/** Whether the record's process still runs (a reused pid does not count). */
export function recordAlive(record: DashboardRecord): boolean {
  return isAlive(
    record.startTime === undefined ? { pid: record.pid } : { pid: record.pid, startTime: record.startTime },
  );
}

/**
 * Claims the state root's dashboard for this process: creates dashboard.json exclusively with a
 * fresh key. Returns `undefined` when another live dashboard holds it; a record whose process is
 * gone (a crash, a reboot) is removed and the claim retried.
 */
export async function claimDashboard(layout: StateLayout): Promise<DashboardRecord | undefined> {
  const file = layout.dashboardFile();
  const record: DashboardRecord = { ...selfIdentity(), key: randomBytes(32).toString("hex") };
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const handle = await open(file, "wx", 0o600);
      try {
        await handle.writeFile(JSON.stringify(record));
        await handle.sync();
      } finally {
        await handle.close();
      }
      return record;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const other = await readDashboardRecord(layout);
    if (other && recordAlive(other)) return undefined;
    await unlink(file).catch(() => undefined);
  }
  return undefined;
}

/** Publishes the port once the dashboard listens (the file is replaced atomically, never half-written). */
export async function publishPort(layout: StateLayout, record: DashboardRecord, port: number): Promise<void> {
  record.port = port;
  await writeJsonAtomic(layout.dashboardFile(), record);
}

/** Removes the record if it is still this process's (a successor's is left alone). */
export async function releaseDashboard(layout: StateLayout, record: DashboardRecord): Promise<void> {
  const current = await readDashboardRecord(layout);
  if (current?.pid === record.pid && current.key === record.key) await unlink(layout.dashboardFile()).catch(() => {});
}
