// The per-instance daemon: started detached by the client, owns one VM, answers on a Unix
// socket, and exits after stop, destroy or prepare (or when idle with nothing running).

import { parseArgs } from "node:util";
import type { EntryKind } from "../state/layout.js";
import { StateLayout } from "../state/layout.js";
import { forgetDaemonMalloc } from "../daemon-malloc.js";
import { runDaemon } from "./server.js";

forgetDaemonMalloc();

const { values } = parseArgs({
  options: { root: { type: "string" }, kind: { type: "string" }, name: { type: "string" } },
});
if (!values.root || !values.name || (values.kind !== "instances" && values.kind !== "templates")) {
  process.stderr.write("usage: daemon --root <state root> --kind instances|templates --name <name>\n");
  process.exit(2);
}
const code = await runDaemon(new StateLayout(values.root), values.kind as EntryKind, values.name).catch(
  (error: unknown) => {
    process.stderr.write(`controller failed: ${(error as Error)?.stack ?? String(error)}\n`);
    return 1;
  },
);
// Exit explicitly: sockets or timers of a torn-down VM must not keep a finished daemon alive.
process.exit(code);
