// An instance's ledger: an append-only record, kept on the host under its entry directory and
// written only by its controller, of what was done to the instance. Each entry is one JSON line
// carrying a sequence number, a time and the SHA-256 of the entry before it, and its own hash over
// all of that: an entry changed, inserted or deleted anywhere but at the very end breaks the chain,
// and `verifyLedger` says where. Files rotate by size; a new file's first entry chains to the last
// hash of the previous one. Secrets never get here: callers record names, never values.
import { createHash } from "node:crypto";
import {
  appendFileSync,
  closeSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
  unlinkSync,
} from "node:fs";
import { join } from "node:path";

/** What an entry records. */
export type LedgerKind =
  /** An action called on the instance: its caller and outcome. */
  | "action"
  /** A lifecycle transition the controller made: created, started, stopped, suspended, … */
  | "lifecycle"
  /** A command run in the guest: argv, cwd, user, exit code, duration, bytes of output. */
  | "exec"
  /** A file copied between host and guest: both paths, size, SHA-256. */
  | "transfer"
  /** A decision about trust: what was asked, the answer, who could answer. */
  | "trust"
  /** An egress decision: host, port, protocol, allowed or denied, the rule. */
  | "egress"
  /** Body bytes each way of the guest's exchanges with one host, port and protocol, summarised per minute. */
  | "egress-bytes"
  /** A secret substituted into a request: its name and the host, never the value. */
  | "secret"
  /** Preview traffic, summarised per minute. */
  | "preview";

export const LEDGER_KINDS: readonly LedgerKind[] = [
  "action",
  "lifecycle",
  "exec",
  "transfer",
  "trust",
  "egress",
  "egress-bytes",
  "secret",
  "preview",
];

/** One entry as written. */
export interface LedgerEntry {
  /** 1, 2, 3, … across files. */
  seq: number;
  /** ISO time. */
  at: string;
  kind: LedgerKind;
  /** What happened: the kind's own fields. */
  data: Record<string, unknown>;
  /** The hash of the entry before it (64 zeros for the first). */
  prev: string;
  /** SHA-256 of `prev`, `seq`, `at`, `kind` and `data` as written. */
  hash: string;
}

/** A file is started anew beyond this size. */
export const LEDGER_ROTATE_BYTES = 8 * 1024 * 1024;
const GENESIS = "0".repeat(64);
const FILE = /^ledger-(\d{6})\.jsonl$/;

function fileName(n: number): string {
  return `ledger-${String(n).padStart(6, "0")}.jsonl`;
}

/** The entry's hash: over the entry as written, its `hash` field left out. */
function hashOf(entry: Omit<LedgerEntry, "hash">): string {
  const body = JSON.stringify({ seq: entry.seq, at: entry.at, kind: entry.kind, data: entry.data, prev: entry.prev });
  return createHash("sha256").update(body).digest("hex");
}

/** The ledger's files in order, oldest first. */
function ledgerFiles(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  return names.filter((n) => FILE.test(n)).sort();
}

/** The lines of one ledger file (a torn last line included, as written). */
function linesOf(file: string): string[] {
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.length > 0);
}

/** How much of a ledger file's end `open` reads to find its last entry, in bytes. */
const TAIL_BYTES = 64 * 1024;

/**
 * The last {@link TAIL_BYTES} of `file` as text (all of it when shorter): a writer opening a
 * context's ledger for each call (remote/laptop-ledger.ts) must not read up to 8 MiB every time.
 */
function tailOf(file: string): string {
  const fd = openSync(file, "r");
  try {
    const size = fstatSync(fd).size;
    const length = Math.min(size, TAIL_BYTES);
    const buffer = Buffer.alloc(length);
    readSync(fd, buffer, 0, length, size - length);
    // A tail cut mid-line (or mid-character) starts with a partial line: a leading "\u0000" marks it.
    return `${size > length ? "\u0000" : ""}${buffer.toString("utf8")}`;
  } finally {
    closeSync(fd);
  }
}

/** The whole lines of a tail read by {@link tailOf} (a partial first line left out). */
function tailLines(tail: string): string[] {
  const lines = tail.split("\n").filter((line) => line.length > 0);
  return tail.startsWith("\u0000") ? lines.slice(1) : lines;
}

/** True when `line` is a whole entry. */
function isEntry(line: string): boolean {
  try {
    const entry = JSON.parse(line) as LedgerEntry;
    return typeof entry.seq === "number" && typeof entry.hash === "string";
  } catch {
    return false;
  }
}

/** The ledger writer of one instance: the controller's, the only one. */
export class Ledger {
  #seq: number;
  #prev: string;
  #file: number;
  #size: number;

  private constructor(
    readonly dir: string,
    state: { seq: number; prev: string; file: number; size: number },
    private readonly rotateBytes: number,
  ) {
    this.#seq = state.seq;
    this.#prev = state.prev;
    this.#file = state.file;
    this.#size = state.size;
  }

  /**
   * Opens the ledger in `dir` to append to it, going on from its last entry. A last line that is
   * not a whole entry (a crash mid-write) is left as it is and the chain goes on from the entry
   * before it: verify then reports it where it is.
   */
  static open(dir: string, options: { rotateBytes?: number } = {}): Ledger {
    const rotate = options.rotateBytes ?? LEDGER_ROTATE_BYTES;
    // Not recursive: a ledger never brings back the entry directory a destroy removed.
    try {
      mkdirSync(dir, { mode: 0o700 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const files = ledgerFiles(dir);
    const last = files.at(-1);
    if (!last) return new Ledger(dir, { seq: 0, prev: GENESIS, file: 1, size: 0 }, rotate);
    const file = Number(FILE.exec(last)![1]);
    // A torn last line stays a line of its own: the next entry must not be written onto it.
    const tail = tailOf(join(dir, last));
    if (tail.length > 0 && !tail.endsWith("\n")) appendFileSync(join(dir, last), "\n");
    let seq = 0;
    let prev = GENESIS;
    for (const name of [...files].reverse()) {
      // The end of the file is enough unless an entry longer than it is the last whole one.
      const ends = name === last ? tailLines(tail) : undefined;
      const lines = ends?.some(isEntry) ? ends : linesOf(join(dir, name));
      for (const line of [...lines].reverse()) {
        try {
          const entry = JSON.parse(line) as LedgerEntry;
          if (typeof entry.seq === "number" && typeof entry.hash === "string") {
            seq = entry.seq;
            prev = entry.hash;
            break;
          }
        } catch {
          // A torn line: the one before it is the last whole entry.
        }
      }
      if (seq > 0) break;
    }
    return new Ledger(dir, { seq, prev, file, size: statSync(join(dir, last)).size }, rotate);
  }

  /** Appends one entry (synchronously: a crash loses nothing recorded before it) and returns it. */
  append(kind: LedgerKind, data: Record<string, unknown>, at = new Date()): LedgerEntry {
    const unhashed = { seq: this.#seq + 1, at: at.toISOString(), kind, data, prev: this.#prev };
    const entry: LedgerEntry = { ...unhashed, hash: hashOf(unhashed) };
    const line = `${JSON.stringify(entry)}\n`;
    const bytes = Buffer.byteLength(line);
    if (this.#size > 0 && this.#size + bytes > this.rotateBytes) {
      this.#file++;
      this.#size = 0;
    }
    appendFileSync(join(this.dir, fileName(this.#file)), line, { mode: 0o600 });
    this.#size += bytes;
    this.#seq = entry.seq;
    this.#prev = entry.hash;
    return entry;
  }
}

/** A lock older than this was left by a writer that died holding it (a holder keeps it for microseconds), in ms. */
const LOCK_STALE_MS = 5_000;

/** Blocks this thread for `ms` (a writer waiting for the lock: the append is synchronous by design). */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Takes `dir`'s lock file; returns its release. */
function lockLedger(dir: string): () => void {
  const file = join(dir, "ledger.lock");
  for (;;) {
    try {
      closeSync(openSync(file, "wx", 0o600));
      return () => unlinkSync(file);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const held = statSync(file, { throwIfNoEntry: false });
    // A writer that crashed between taking and releasing it would stop every later one.
    if (held && Date.now() - held.mtimeMs > LOCK_STALE_MS) unlinkSync(file);
    else pause(2);
  }
}

/**
 * Appends `records` to the ledger in `dir` when several processes write it (this machine's ledger
 * of a context: every CLI command, Pi session and library calling through it): under a lock file,
 * the ledger is opened at its end as it is now, so no two writers give out the same sequence
 * number or chain to the same entry. Synchronous like `append`: what a process records just before
 * it exits (on Ctrl-C) is on disk. `dir`'s parent must exist.
 */
export function appendShared(
  dir: string,
  records: readonly { kind: LedgerKind; data: Record<string, unknown> }[],
  at = new Date(),
): LedgerEntry[] {
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  const release = lockLedger(dir);
  try {
    const ledger = Ledger.open(dir);
    return records.map((r) => ledger.append(r.kind, r.data, at));
  } finally {
    release();
  }
}

/** Where a ledger's chain breaks. */
export interface LedgerBreak {
  /** The file (its name in the ledger directory) and the 1-based line. */
  file: string;
  line: number;
  /** The sequence number expected there. */
  seq: number;
  /** What is wrong, in words. */
  reason: string;
}

/** What {@link verifyLedger} found. */
export interface LedgerVerdict {
  /** Whole entries checked. */
  entries: number;
  /** Files checked. */
  files: number;
  /** The first break, if any. */
  broken?: LedgerBreak;
  /** The last entry's hash (what a copy kept elsewhere can be compared with). */
  lastHash: string;
}

/**
 * Checks every entry's hash and its link to the one before, in order across files. The first
 * entry that does not fit is the break: a changed entry fails its own hash, an inserted or
 * deleted one breaks the sequence or the link.
 */
export function verifyLedger(dir: string): LedgerVerdict {
  const files = ledgerFiles(dir);
  let prev = GENESIS;
  let seq = 0;
  let entries = 0;
  for (const name of files) {
    const lines = linesOf(join(dir, name));
    for (let i = 0; i < lines.length; i++) {
      const where = { file: name, line: i + 1, seq: seq + 1 };
      let entry: LedgerEntry;
      try {
        entry = JSON.parse(lines[i]!) as LedgerEntry;
      } catch {
        return { entries, files: files.length, lastHash: prev, broken: { ...where, reason: "not a whole entry" } };
      }
      const reason =
        entry.seq !== seq + 1
          ? `sequence ${String(entry.seq)} where ${seq + 1} was due: an entry was removed or added`
          : entry.prev !== prev
            ? "it does not name the hash of the entry before it"
            : entry.hash !== hashOf(entry)
              ? "its content does not match its hash: it was changed"
              : undefined;
      if (reason) return { entries, files: files.length, lastHash: prev, broken: { ...where, reason } };
      prev = entry.hash;
      seq = entry.seq;
      entries++;
    }
  }
  return { entries, files: files.length, lastHash: prev };
}

/** Options of {@link readLedger}. */
export interface LedgerQuery {
  /** Entries at or after this time. */
  since?: Date;
  /** Only these kinds. */
  kinds?: readonly LedgerKind[];
  /** Only entries after this sequence number (a follower's cursor). */
  after?: number;
}

/** The whole entries of a ledger that match `query`, oldest first (torn lines are skipped). */
export function readLedger(dir: string, query: LedgerQuery = {}): LedgerEntry[] {
  const out: LedgerEntry[] = [];
  const since = query.since?.toISOString();
  for (const name of ledgerFiles(dir)) {
    for (const line of linesOf(join(dir, name))) {
      let entry: LedgerEntry;
      try {
        entry = JSON.parse(line) as LedgerEntry;
      } catch {
        continue;
      }
      if (query.after !== undefined && entry.seq <= query.after) continue;
      if (since !== undefined && entry.at < since) continue;
      if (query.kinds && !query.kinds.includes(entry.kind)) continue;
      out.push(entry);
    }
  }
  return out;
}
