// An action's arguments as a ledger keeps them (an instance's, and this machine's ledger of a
// context): as the caller sent them, except what could carry a secret or a file's whole text: an
// exec's environment (its names only) and a write's content (its size and hash).
import { createHash } from "node:crypto";

/** `args` without the action and name (the entry has them), values that may be secret left out. */
export function recordedArgs(args: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(args)) {
    if (key === "action" || key === "name") continue;
    if (key === "env" && value && typeof value === "object") out.envNames = Object.keys(value);
    else if (key === "content" && typeof value === "string") {
      out.contentBytes = Buffer.byteLength(value);
      out.contentSha256 = createHash("sha256").update(value).digest("hex");
    } else out[key] = value;
  }
  return out;
}
