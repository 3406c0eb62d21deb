// The ledger's hash chain on its own: entries across rotated files verify; a single entry changed,
// inserted or deleted at a random place is found exactly there; a torn last line (a crash mid-write)
// is reported where it is, and the ledger goes on after it. No daemon.
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Ledger, readLedger, verifyLedger, type LedgerEntry } from "../src/state/ledger.js";

let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "pisb-ledger-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A ledger of `n` entries in files of about `rotateBytes`. */
function filled(n: number, rotateBytes: number): string {
  const ledger = Ledger.open(join(dir, "ledger"), { rotateBytes });
  for (let i = 0; i < n; i++) ledger.append(i % 3 ? "action" : "exec", { i, text: "x".repeat(i % 17) });
  return join(dir, "ledger");
}

/** Every line of the ledger in order, with its file. */
function lines(ledgerDir: string): { file: string; line: string }[] {
  return readdirSync(ledgerDir)
    .sort()
    .flatMap((file) =>
      readFileSync(join(ledgerDir, file), "utf8")
        .split("\n")
        .filter(Boolean)
        .map((line) => ({ file, line })),
    );
}

function rewrite(ledgerDir: string, all: { file: string; line: string }[]): void {
  for (const file of readdirSync(ledgerDir)) rmSync(join(ledgerDir, file));
  for (const { file, line } of all) writeFileSync(join(ledgerDir, file), `${line}\n`, { flag: "a" });
}

test("entries chain across rotated files, and a reopened ledger goes on from its last entry", () => {
  const ledgerDir = filled(120, 2_000);
  expect(readdirSync(ledgerDir).length).toBeGreaterThan(3);
  Ledger.open(ledgerDir, { rotateBytes: 2_000 }).append("lifecycle", { state: "stopped" });
  const verdict = verifyLedger(ledgerDir);
  expect(verdict).toMatchObject({ entries: 121 });
  expect(verdict.broken).toBeUndefined();
  const entries = readLedger(ledgerDir);
  expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: 121 }, (_, i) => i + 1));
  expect(entries.at(-1)).toMatchObject({ kind: "lifecycle", data: { state: "stopped" } });
  expect(readLedger(ledgerDir, { kinds: ["exec"], after: 100 }).every((e) => e.kind === "exec" && e.seq > 100)).toBe(
    true,
  );
});

test("one entry changed, inserted or deleted at a random place is found at that place, the end included (only the very last entry deleted is not: its hash kept elsewhere tells)", () => {
  const source = filled(200, 4_000);
  const original = lines(source);
  let seed = 7;
  const random = (n: number) => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31), seed % n);
  for (let trial = 0; trial < 60; trial++) {
    const copy = join(dir, `trial-${trial}`);
    cpSync(source, copy, { recursive: true });
    const how = (["change", "insert", "delete"] as const)[trial % 3]!;
    // Anywhere: the first three at the end (a change of the last entry, a copy of it appended, the
    // one before it deleted), the others at random.
    const last = { change: original.length - 1, insert: original.length, delete: original.length - 2 }[how];
    const at = trial < 3 ? last : random(last + 1);
    const all = original.map((l) => ({ ...l }));
    if (how === "change") {
      const entry = JSON.parse(all[at]!.line) as LedgerEntry;
      entry.data = { ...entry.data, forged: true };
      all[at]!.line = JSON.stringify(entry);
    } else if (how === "insert") {
      const copied = all[Math.min(at, all.length - 1)]!;
      all.splice(at, 0, { file: copied.file, line: copied.line });
    } else {
      all.splice(at, 1);
    }
    rewrite(copy, all);
    const verdict = verifyLedger(copy);
    // An inserted copy of an entry passes for it; the one after it no longer fits (appended: itself).
    const expected = how === "insert" && at < original.length ? at + 2 : at + 1;
    expect({ trial, how, broken: verdict.broken?.seq }).toEqual({ trial, how, broken: expected });
    expect(verdict.entries).toBe(expected - 1);
    rmSync(copy, { recursive: true });
  }
});

test("a torn last line is reported where it is; the ledger goes on after it", () => {
  const ledgerDir = filled(5, 1_000_000);
  const [file] = readdirSync(ledgerDir);
  writeFileSync(join(ledgerDir, file!), '{"seq":6,"at":"20', { flag: "a" });
  const reopened = Ledger.open(ledgerDir);
  reopened.append("lifecycle", { state: "starting" });
  expect(verifyLedger(ledgerDir).broken).toMatchObject({ seq: 6, line: 6, reason: "not a whole entry" });
  // Readers skip it.
  expect(readLedger(ledgerDir).map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);
});

test("a writer reopening a long ledger reads only its end, and goes on after an entry longer than that end", () => {
  const ledgerDir = join(dir, "ledger");
  const ledger = Ledger.open(ledgerDir);
  for (let i = 0; i < 2_000; i++) ledger.append("action", { i, text: "x".repeat(40) });
  Ledger.open(ledgerDir).append("exec", { cmd: "y".repeat(100_000) });
  Ledger.open(ledgerDir).append("exec", { cmd: "z".repeat(200_000) });
  Ledger.open(ledgerDir).append("lifecycle", { state: "stopped" });
  expect(verifyLedger(ledgerDir)).toMatchObject({ entries: 2_003 });
  expect(verifyLedger(ledgerDir).broken).toBeUndefined();
  expect(readLedger(ledgerDir).at(-1)).toMatchObject({ seq: 2_003, data: { state: "stopped" } });
});
