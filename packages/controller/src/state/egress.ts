// An instance's egress approvals as files on the host: the hosts the user allowed it to reach for
// good (its grants), the requests its daemon holds for an answer (its asks), and who can answer
// now (one file per Pi session or dashboard, touched while it looks). The daemon decides; Pi, the
// dashboard and the CLI read these to know what to ask, and answer through the daemon.
import { mkdir, readdir, rm, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { writeJsonAtomic } from "@pi-sandbox/config";
import type { Caller } from "../wire.js";
import type { StateLayout } from "./layout.js";
import { readJson } from "./read-json.js";

/** A host (or `*.` pattern) the user allowed an instance to reach, beyond its allowedHosts. */
export interface EgressGrant {
  /** The host name or `*.` wildcard, lower case. */
  host: string;
  /** When it was granted (ISO time). */
  at: string;
  /** Who granted it. */
  by: Caller;
}

/** A request the daemon holds until the user answers (or the deadline passes). */
export interface EgressAsk {
  /** The host the guest asked for, lower case; checked against HOST_PATTERN before it is asked. */
  host: string;
  port: number;
  protocol: "http" | "https";
  method: string;
  /** When the first request held for this host arrived (ISO time). */
  since: string;
  /** When it is refused without an answer (ISO time). */
  until: string;
  /** How many requests to this host wait for the answer. */
  waiting: number;
}

/** Who can answer an ask. */
export const EGRESS_ANSWERERS = ["pi", "dashboard"] as const;
/** One of {@link EGRESS_ANSWERERS}. */
export type EgressAnswerer = (typeof EGRESS_ANSWERERS)[number];

/** How long an answerer's last look counts: it looks every few seconds while it can answer. */
export const ANSWERER_FRESH_MS = 15_000;
/** When an answerer's file is removed as stale, in ms. */
const STALE_ANSWERER_MS = 60 * 60_000;

/** The instance's grants, oldest first (none when the file is missing). */
export async function readGrants(layout: StateLayout, name: string): Promise<EgressGrant[]> {
  const file = await readJson<{ grants?: EgressGrant[] }>(layout.egressGrantsFile(name));
  return Array.isArray(file?.grants) ? file.grants : [];
}

/**
 * Rewrites the instance's grants through `change` (read, change, atomic write). The daemon adds
 * grants and the CLI's revoke takes them back, both on the user's word; two at the same moment
 * would lose one, which a user typing and clicking does not do.
 */
export async function updateGrants(
  layout: StateLayout,
  name: string,
  change: (grants: EgressGrant[]) => EgressGrant[],
): Promise<EgressGrant[]> {
  const grants = change(await readGrants(layout, name));
  await writeJsonAtomic(layout.egressGrantsFile(name), { grants });
  return grants;
}

/** The asks the daemon holds now: those past their deadline (a daemon that died holding them) left out. */
export async function readAsks(layout: StateLayout, name: string, now = Date.now()): Promise<EgressAsk[]> {
  const file = await readJson<{ asks?: EgressAsk[] }>(layout.egressAsksFile(name)).catch(() => undefined);
  return (Array.isArray(file?.asks) ? file.asks : []).filter((ask) => Date.parse(ask.until) > now);
}

/** Writes the asks the daemon holds (the daemon only). */
export async function writeAsks(layout: StateLayout, name: string, asks: readonly EgressAsk[]): Promise<void> {
  await writeJsonAtomic(layout.egressAsksFile(name), { asks });
}

/** A file name for one answerer: its kind and its own id (letters, digits, `-`). */
function answererFile(layout: StateLayout, name: string, who: EgressAnswerer, id: string): string {
  return join(layout.egressAnswerersDir(name), `${who}.${id.replace(/[^A-Za-z0-9-]/g, "")}`);
}

/**
 * Says that `who` (one Pi session or dashboard, `id`) can answer the instance's asks now; call
 * again within {@link ANSWERER_FRESH_MS} to keep saying it. An instance directory that is gone is
 * left alone (an instance destroyed meanwhile).
 */
export async function markAnswerer(layout: StateLayout, name: string, who: EgressAnswerer, id: string): Promise<void> {
  const file = answererFile(layout, name, who, id);
  const now = new Date();
  try {
    await utimes(file, now, now);
  } catch {
    try {
      await mkdir(layout.egressAnswerersDir(name), { mode: 0o700 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") return;
    }
    await writeFile(file, "", { mode: 0o600 }).catch(() => undefined);
  }
}

/** Says that `who` can no longer answer (its session ended). */
export async function dropAnswerer(layout: StateLayout, name: string, who: EgressAnswerer, id: string): Promise<void> {
  await rm(answererFile(layout, name, who, id), { force: true });
}

/** Who can answer now: the kinds of answerer that looked within {@link ANSWERER_FRESH_MS}. */
export async function answerersNow(layout: StateLayout, name: string, now = Date.now()): Promise<EgressAnswerer[]> {
  const dir = layout.egressAnswerersDir(name);
  const files = await readdir(dir).catch(() => [] as string[]);
  const present = new Set<EgressAnswerer>();
  for (const file of files) {
    const who = file.split(".")[0];
    if (who !== "pi" && who !== "dashboard") continue;
    const info = await stat(join(dir, file)).catch(() => undefined);
    if (info && now - info.mtimeMs < ANSWERER_FRESH_MS) present.add(who);
    // Left by a session that ended without saying so (Pi killed): gone after an hour.
    else if (info && now - info.mtimeMs > STALE_ANSWERER_MS) await rm(join(dir, file), { force: true });
  }
  return [...present].sort();
}
