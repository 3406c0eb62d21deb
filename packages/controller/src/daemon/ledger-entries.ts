// What the daemon writes to an instance's ledger about each call it answers (state/ledger.ts): the
// action with its caller and outcome, and from the results of execs, copies and branch actions what
// ran, what moved and which checkpoint or fork was made. Arguments are kept as state/ledger-args.ts
// says (no secret, no file's text).
import { createHash } from "node:crypto";
import type { LedgerKind } from "../state/ledger.js";
import { recordedArgs } from "../state/ledger-args.js";

/** One entry to append. */
export interface LedgerRecord {
  kind: LedgerKind;
  data: Record<string, unknown>;
}

/** What the ledger needs of the execs still running: what was run, by handle. */
export class CallLedger {
  readonly #running = new Map<string, { cmd: unknown; cwd: unknown }>();

  /**
   * The entries of one call: the action (caller, arguments, outcome, duration), and for a finished
   * exec or a copy, what ran or moved. `outcome.error` is the code the call failed with; `from`
   * the machine a call came from over a context, as its side says (`user@host`).
   */
  records(
    args: Record<string, unknown> & { action: string },
    caller: string,
    ms: number,
    outcome: { result: unknown } | { error: string },
    from?: string,
  ): LedgerRecord[] {
    const records: LedgerRecord[] = [
      {
        kind: "action",
        data: {
          action: args.action,
          caller,
          ...(from ? { from } : {}),
          args: recordedArgs(args),
          outcome: "error" in outcome ? outcome.error : "ok",
          ms: Math.round(ms),
        },
      },
    ];
    if ("error" in outcome) return records;
    const result = outcome.result as Record<string, unknown> | null;
    if (!result || typeof result !== "object") return records;
    const exec = this.#exec(args, result);
    if (exec) records.push({ kind: "exec", data: exec });
    const transfer = transferOf(args, result);
    if (transfer) records.push({ kind: "transfer", data: transfer });
    const branch = branchOf(args, result);
    if (branch) records.push({ kind: "lifecycle", data: branch });
    return records;
  }

  /** A finished exec's entry (one that is still running is remembered until exec-status sees it end). */
  #exec(args: Record<string, unknown>, result: Record<string, unknown>): Record<string, unknown> | undefined {
    if (args.action !== "exec" && args.action !== "exec-status") return undefined;
    const pid = typeof result.pid === "string" ? result.pid : String(args.pid ?? "");
    const ran = args.action === "exec" ? { cmd: args.cmd, cwd: args.cwd ?? null } : this.#running.get(pid);
    if (result.running === true) {
      if (args.action === "exec") this.#running.set(pid, { cmd: args.cmd, cwd: args.cwd ?? null });
      return undefined;
    }
    this.#running.delete(pid);
    return {
      pid,
      ...(ran ?? { cmd: null, cwd: null }),
      // The guest agent runs every command as root (`exec -u` puts runuser into the command).
      user: "root",
      exitCode: result.exitCode ?? null,
      ...(typeof result.signal === "string" ? { signal: result.signal } : {}),
      durationMs: result.durationMs ?? null,
      outputBytes:
        Buffer.byteLength(String(result.output ?? "")) +
        Number(result.truncatedBytes ?? 0) +
        Buffer.byteLength(String(result.stderr ?? "")) +
        Number(result.stderrTruncatedBytes ?? 0),
    };
  }
}

/** A copy's entry: both ends, files, bytes and the sha256 of a single file. */
function transferOf(
  args: Record<string, unknown>,
  result: Record<string, unknown>,
): Record<string, unknown> | undefined {
  if (args.action === "write" && typeof args.content === "string") {
    return {
      direction: "upload",
      from: "(content)",
      to: args.path,
      files: 1,
      bytes: Buffer.byteLength(args.content),
      sha256: createHash("sha256").update(args.content).digest("hex"),
    };
  }
  if (args.action !== "upload" && args.action !== "download") return undefined;
  return {
    direction: args.action,
    from: args.from,
    to: result.to ?? args.to,
    files: result.files ?? null,
    bytes: result.bytes ?? null,
    ...(typeof result.sha256 === "string" ? { sha256: result.sha256 } : {}),
    ...(typeof result.treeSha256 === "string" ? { treeSha256: result.treeSha256 } : {}),
  };
}

/**
 * The branch an action made, beside the state transitions the lifecycle records: a checkpoint
 * kept or removed, a rewind, the forks made.
 */
function branchOf(args: Record<string, unknown>, result: Record<string, unknown>): Record<string, unknown> | undefined {
  const checkpoint = (view: unknown) => {
    const c = (view ?? {}) as Record<string, unknown>;
    return { id: c.id ?? null, ...(typeof c.label === "string" ? { label: c.label } : {}), kind: c.kind ?? null };
  };
  switch (args.action) {
    case "checkpoint":
      return { event: "checkpoint kept", checkpoint: checkpoint(result.checkpoint) };
    case "checkpoint-rm":
      return { event: "checkpoint removed", checkpoint: checkpoint(result.removed) };
    case "rewind":
      return {
        event: "rewound",
        checkpoint: checkpoint(result.rewound),
        ...(result.before ? { before: checkpoint(result.before) } : {}),
      };
    case "fork":
      return {
        event: "forked",
        forks: Array.isArray(result.forks) ? result.forks.map((f) => (f as { name?: unknown }).name) : [],
      };
    default:
      return undefined;
  }
}
