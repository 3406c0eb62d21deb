// The waker process: started detached by a daemon that parks its instance, one per state root. It
// holds the previews of parked instances, starts an instance's daemon on its first request, and
// exits once it holds nothing. Kept small: see waker.ts for what it does not load.
import { closeSync, openSync, renameSync, statSync, writeSync } from "node:fs";
import { parseArgs } from "node:util";
import { forgetDaemonMalloc } from "../daemon-malloc.js";
import { daemonEntry, daemonEnv, spawnDetached } from "../daemon-process.js";
import { runWaker } from "./waker.js";

/** The waker's log is rotated (one previous file kept) when it passes this at a start, in bytes. */
const LOG_ROTATE_BYTES = 1024 * 1024;

forgetDaemonMalloc();

const { values } = parseArgs({
  options: {
    root: { type: "string" },
    socket: { type: "string" },
    "pid-file": { type: "string" },
    log: { type: "string" },
  },
});
const { root, socket, log: logFile } = values;
const pidFile = values["pid-file"];
if (!root || !socket || !pidFile || !logFile) {
  process.stderr.write("usage: waker --root <state root> --socket <path> --pid-file <path> --log <path>\n");
  process.exit(2);
}
if ((statSync(logFile, { throwIfNoEntry: false })?.size ?? 0) > LOG_ROTATE_BYTES) renameSync(logFile, `${logFile}.1`);
const logFd = openSync(logFile, "a", 0o600);
/** One line per message, control characters escaped (names and errors only; still never raw). */
const log = (message: string) => {
  const text = message.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
  writeSync(logFd, `${new Date().toISOString()} info [waker] ${text}\n`);
};
process.on("SIGHUP", () => undefined);
// SIGTERM ends it cleanly: its pid file and socket go (the parked instances read plainly suspended).
const ended = new AbortController();
process.once("SIGTERM", () => ended.abort());
const code = await runWaker(
  { socket, pidFile },
  {
    // As the client starts a daemon (its early failures land in this log); the daemon takes the
    // previews back as it starts, before it answers on its socket.
    spawnDaemon: (name) =>
      spawnDetached(
        process.execPath,
        daemonEntry(),
        ["--root", root, "--kind", "instances", "--name", name],
        logFd,
        daemonEnv(process.env, root),
      ).exit,
    log,
    signal: ended.signal,
  },
).catch((error: unknown) => {
  log(`waker failed: ${(error as Error)?.stack ?? String(error)}`);
  return 1;
});
closeSync(logFd);
// Exit explicitly: nothing of a finished waker may keep it alive.
process.exit(code);
