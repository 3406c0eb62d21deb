// The per-instance daemon: started detached by the client, owns one VM, answers on a Unix
// socket, and exits after stop, destroy or prepare (or when idle with nothing running).

import { parseArgs } from "node:util";
import { enableOwnCompileCache } from "../compile-cache.js";
import { forgetDaemonMalloc } from "../daemon-malloc.js";
import { traceProcessStart } from "../trace.js";
import type { EntryKind } from "../state/layout.js";

forgetDaemonMalloc();
// Before the daemon's modules load (imported below, not above): they stand between a start and its boot.
enableOwnCompileCache();
const [{ StateLayout }, { runDaemon }] = await Promise.all([import("../state/layout.js"), import("./server.js")]);
traceProcessStart("daemon");

const { values } = parseArgs({
  options: { root: { type: "string" }, kind: { type: "string" }, name: { type: "string" } },
});
if (!values.root || !values.name || (values.kind !== "instances" && values.kind !== "templates")) {
  process.stderr.write("usage: daemon --root <state root> --kind instances|templates --name <name>\n");
  process.exit(2);
}
// How long a daemon waits, quiet, before it exits or parks its sleeping instance: 30 s unless the
// environment says otherwise (tests shorten it to see parking without waiting).
const quiet = process.env.PI_SANDBOX_DAEMON_IDLE_EXIT_MS;
const idleExitMs = quiet === undefined || quiet === "" ? undefined : Number(quiet);
if (idleExitMs !== undefined && !(Number.isInteger(idleExitMs) && idleExitMs >= 1000)) {
  process.stderr.write(`PI_SANDBOX_DAEMON_IDLE_EXIT_MS must be a whole number of ms, at least 1000 (got ${quiet})\n`);
  process.exit(2);
}
const code = await runDaemon(new StateLayout(values.root), values.kind as EntryKind, values.name, {
  idleExitMs,
}).catch((error: unknown) => {
  process.stderr.write(`controller failed: ${(error as Error)?.stack ?? String(error)}\n`);
  return 1;
});
// Exit explicitly: sockets or timers of a torn-down VM must not keep a finished daemon alive.
process.exit(code);
