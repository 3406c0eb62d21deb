// A ledger entry in words, as `audit` prints it and the dashboard's timeline shows it. Caller and
// guest text (commands, paths, host names) is written as it is: the caller escapes it for where it
// goes (a terminal line, a page's text). A call made through a context says which way it went.
import type { LedgerEntry } from "./ledger.js";

/**
 * Where a call went or came from over a context: this machine's ledger of a context names the
 * context it was sent through, the far side's the machine it came from.
 */
function via(d: Record<string, unknown>): string {
  if (typeof d.context === "string") return ` through context ${d.context}`;
  return typeof d.from === "string" ? ` via context from ${d.from}` : "";
}

/** What an entry says happened, in words (one line once escaped; guest and caller text as written). */
export function entryWhat(entry: LedgerEntry): string {
  const d = entry.data;
  const s = (value: unknown) => String(value);
  switch (entry.kind) {
    case "action":
      return `${s(d.action)}${d.name ? ` of ${s(d.name)}` : ""} by ${s(d.caller)}${via(d)}: ${s(d.outcome)} (${s(d.ms)} ms) ${JSON.stringify(d.args)}`;
    case "lifecycle":
      if (d.event === "forked") return `forked into ${(d.forks as unknown[]).map(s).join(", ")}`;
      if (typeof d.event === "string") return `${d.event} ${JSON.stringify(d.checkpoint)}`;
      return `${s(d.state)}${d.from ? ` (was ${s(d.from)})` : ""}`;
    case "exec":
      return `exit ${s(d.exitCode)}${d.signal ? ` (${s(d.signal)})` : ""} after ${s(d.durationMs)} ms, ${s(d.outputBytes)} bytes of output, as ${s(d.user)}${d.cwd ? ` in ${s(d.cwd)}` : ""}: ${s(d.cmd)}`;
    case "transfer": {
      const hash = d.sha256 ? `, sha256 ${s(d.sha256)}` : d.treeSha256 ? `, tree sha256 ${s(d.treeSha256)}` : "";
      return `${s(d.direction)} ${JSON.stringify(d.from)} -> ${JSON.stringify(d.to)}: ${s(d.files)} file(s), ${s(d.bytes)} bytes${hash}`;
    }
    case "trust":
      return `${s(d.answer)} to ${s(d.action)}${via(d)}, answered by ${s(d.by)}: ${Array.isArray(d.asked) ? d.asked.map(s).join(" | ") : ""}`;
    case "egress":
      return `${d.allowed ? "allowed" : "denied"} ${s(d.protocol)} ${s(d.method)} ${s(d.host)}:${s(d.port)} (${s(d.rule)})`;
    case "egress-bytes":
      return `${s(d.bytesOut)} bytes out and ${s(d.bytesIn)} in (bodies) over ${s(d.exchanges)} ${s(d.protocol)} exchange(s) with ${s(d.host)}:${s(d.port)} from ${s(d.from)}`;
    case "secret":
      return `secret ${s(d.secret)} put into a request to ${s(d.host)}`;
    case "preview":
      return `${s(d.requests)} preview request(s), ${s(d.upgrades)} WebSocket open(s), ${s(d.bytesIn)} bytes in and ${s(d.bytesOut)} out in the minute from ${s(d.from)}`;
    default:
      return JSON.stringify(d);
  }
}
