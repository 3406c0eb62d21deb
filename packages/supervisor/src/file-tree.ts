// What a guest path is, a directory's tree and mkdir, for copies of whole directories. The guest
// side is `agent/pi_sandbox_agent/file_tree.py`. Every entry the agent lists is checked: a
// relative path of plain names (no `.`, `..` or empty segment), listed after its parent directory,
// once, and no more entries than asked for; so a caller can join it under a destination safely.

import type { AgentChannel } from "./channel.js";
import { BadReply, boolean, integer, record, text } from "./reply-checks.js";
import { type CallOptions, REPLY_MARGIN_MS } from "./options.js";

/** Kinds of guest file-system entries; symbolic links are never followed. */
export type GuestEntryType = "file" | "directory" | "symlink" | "other";

/** What a guest path is. */
export interface GuestStat {
  /** Its type (a link is `symlink`, whatever it points at). */
  type: GuestEntryType;
  /** Bytes of a regular file, else 0. */
  size: number;
  /** Permission bits (`mode & 0o7777`). */
  mode: number;
  /** For a link: what it leads to (`missing` when nothing). */
  target?: GuestEntryType | "missing";
}

/** One entry of a guest directory tree. */
export interface GuestTreeEntry extends GuestStat {
  /** Path relative to the listed directory, `/`-separated, plain names only. */
  path: string;
}

/** A guest directory tree, parents before children. */
export interface GuestTree {
  /** The entries, at most the `maxEntries` asked for. */
  entries: GuestTreeEntry[];
  /** The listing stopped early (too many entries); `entries` is then incomplete. */
  truncated: boolean;
  /** Entries left out because their names are not UTF-8. */
  skippedNames: number;
}

const TYPES: readonly string[] = ["file", "directory", "symlink", "other"];

function entryType(value: unknown, what: string): GuestEntryType {
  if (typeof value !== "string" || !TYPES.includes(value)) throw new BadReply(what, "is not an entry type");
  return value as GuestEntryType;
}

function parseStat(raw: unknown, what: string): GuestStat {
  const r = record(raw, what);
  const type = entryType(r.type, `${what}.type`);
  const stat: GuestStat = {
    type,
    size: integer(r.size, `${what}.size`),
    mode: integer(r.mode, `${what}.mode`, 0, 0o7777),
  };
  if (type === "symlink" && r.target !== undefined) {
    stat.target = r.target === "missing" ? "missing" : entryType(r.target, `${what}.target`);
  }
  return stat;
}

/** A relative path the host can join under a directory: plain, well-formed names. */
function relativePath(value: unknown, what: string): string {
  const path = text(value, what);
  if (!path.isWellFormed() || path.includes("\0")) throw new BadReply(what, "is not a well-formed name");
  for (const segment of path.split("/")) {
    if (segment === "" || segment === "." || segment === "..") throw new BadReply(what, "is not a plain relative path");
  }
  return path;
}

function parseTree(raw: unknown, maxEntries: number): GuestTree {
  const r = record(raw, "result");
  if (!Array.isArray(r.entries) || r.entries.length > maxEntries)
    throw new BadReply("result.entries", `is not a list of at most ${maxEntries} entries`);
  const directories = new Set<string>();
  const seen = new Set<string>();
  const entries = r.entries.map((item: unknown, i) => {
    const what = `result.entries[${i}]`;
    const path = relativePath(record(item, what).path, `${what}.path`);
    const entry = { path, ...parseStat(item, what) };
    const slash = path.lastIndexOf("/");
    if (slash !== -1 && !directories.has(path.slice(0, slash))) throw new BadReply(what, "comes before its directory");
    if (seen.has(path)) throw new BadReply(what, "is listed twice");
    seen.add(path);
    if (entry.type === "directory") directories.add(path);
    return entry;
  });
  return {
    entries,
    truncated: boolean(r.truncated, "result.truncated"),
    skippedNames: integer(r.skippedNames, "result.skippedNames"),
  };
}

/** What `path` is (FILE_NOT_FOUND when nothing). */
export function statThroughAgent(channel: AgentChannel, path: string, options: CallOptions): Promise<GuestStat> {
  return channel.request("file-stat", { path }, (raw) => parseStat(raw, "result"), {
    signal: options.signal,
    timeoutMs: REPLY_MARGIN_MS,
  });
}

/** Every entry under a directory, at most `maxEntries` (FILE_NOT_DIRECTORY for anything else). */
export function listThroughAgent(
  channel: AgentChannel,
  path: string,
  maxEntries: number,
  options: CallOptions,
): Promise<GuestTree> {
  return channel.request("file-list", { path, maxEntries }, (raw) => parseTree(raw, maxEntries), {
    signal: options.signal,
    timeoutMs: REPLY_MARGIN_MS,
  });
}

/** Creates a directory and its missing parents (an existing directory is fine). */
export async function mkdirThroughAgent(
  channel: AgentChannel,
  path: string,
  options: CallOptions & { mode?: number },
): Promise<void> {
  const args = options.mode === undefined ? { path } : { path, mode: options.mode };
  await channel.request(
    "file-mkdir",
    args,
    (raw) => {
      if (text(record(raw, "result").path, "result.path") !== path)
        throw new BadReply("result.path", "is not the path asked for");
    },
    { signal: options.signal, timeoutMs: REPLY_MARGIN_MS },
  );
}
