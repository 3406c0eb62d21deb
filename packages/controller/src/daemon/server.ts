// The daemon process: takes the entry's pid file, serves calls on its Unix socket, and exits when
// its entry is stopped, destroyed or idle.
import { createServer, type Server, type Socket } from "node:net";
import { mkdir, rm } from "node:fs/promises";
import { dirname } from "node:path";
import { validateAction } from "../actions/kit/validate.js";
import { ControllerError, isControllerError } from "../errors.js";
import { parseHostGuard } from "../host-guard.js";
import { ensurePrivateDir, type EntryKind, type StateLayout } from "../state/layout.js";
import { daemonLive, pidAlive } from "../state/liveness.js";
import { listenPrivate } from "../private-socket.js";
import { fileIdentity, removeIfOwn, takePidFile } from "../probes.js";
import { readJsonLines, writeJsonLine, type ClientMessage } from "../wire.js";
import { InstanceController, toControllerError } from "./instance.js";
import { CallLedger } from "./ledger-entries.js";
import { createFileLogger, type DaemonLogger } from "../log.js";
import type { InstanceRuntime } from "./runtime.js";
import { traceMark } from "../trace.js";

/**
 * A daemon with no VM and no request for this long exits (e.g. after a failed create); one whose
 * instance sleeps (suspended while unused) parks it after this long without a call (parking.ts).
 */
const IDLE_EXIT_MS = 30_000;
/** After a park that failed (no waker, a port it could not bind), the daemon keeps the previews this long. */
const PARK_RETRY_MS = 5 * 60_000;

/** The machine a call came from over a context, as the ledger keeps it: one short printable word, else none. */
function fromOf(value: unknown): { from?: string } {
  return typeof value === "string" && /^[\x21-\x7e]{1,255}$/.test(value) ? { from: value } : {};
}

/**
 * Runs the daemon until its entry is stopped, destroyed or prepared; resolves with an exit code.
 * Tests run a daemon in-process with `runtime` (the local runtime instead of real VMs) and a
 * shorter `idleExitMs`.
 */
export async function runDaemon(
  layout: StateLayout,
  kind: EntryKind,
  name: string,
  options: { runtime?: InstanceRuntime; idleExitMs?: number } = {},
): Promise<number> {
  await layout.ensurePrivate();
  await mkdir(layout.entryDir(kind, name), { recursive: true, mode: 0o700 });
  const log = createFileLogger(
    layout.logFile(kind, name),
    `[${kind === "templates" ? "template" : "instance"} ${name}]`,
  );
  const socketPath = layout.socketPath(kind, name);
  // Before the pid file, so a refusal leaves nothing behind. A long state path puts the socket
  // under the shared temp dir, where another user may have made the directory first.
  try {
    await ensurePrivateDir(dirname(socketPath));
  } catch (error) {
    if (isControllerError(error)) log.warn(`${error.code}: ${error.message}. ${error.hint ?? ""}`.trim());
    throw error;
  }
  const pidFile = layout.pidFile(kind, name);
  const owner = {
    alive: pidAlive,
    answers: async () => (await daemonLive(pidFile, socketPath)).live,
    patienceMs: 5000,
  };
  if (!(await takePidFile(pidFile, owner))) {
    log.info("another controller owns this entry; exiting");
    return 0;
  }
  const pidFileIdentity = await fileIdentity(pidFile);
  await rm(socketPath, { force: true });
  const controller = new InstanceController(layout, kind, name, log, options.runtime);
  const ledger = new CallLedger();
  // Before the socket answers: a parked instance's previews come back from the waker first, so the
  // first call (or the request that had this daemon started) finds the instance asleep, as it was.
  await controller.adopt().catch((error: unknown) => log.warn(`taking the previews back: ${String(error)}`));
  const sockets = new Set<Socket>();
  let inFlight = 0;
  let lastActivity = Date.now();
  /** The last call's end (pings, such as list's, do not count): an asleep instance parks after a quiet spell. */
  let lastCall = Date.now();
  let parkAt = 0;
  /** Since when the instance sleeps (the first tick that saw it asleep). */
  let asleepSince: number | undefined;

  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => undefined);
    readJsonLines<ClientMessage>(socket, (message) => void handle(socket, message, log));
  });

  /**
   * A model's call its client refused (the user's no, nobody to ask, a path it may never reach):
   * its trust notes and the action with the refusal's code go into the ledger; nothing runs.
   */
  function refusedCall(message: Extract<ClientMessage, { type: "refused" }>): { recorded: boolean } {
    let args: Record<string, unknown> & { action: string };
    try {
      args = validateAction(message.action).args;
    } catch {
      return { recorded: false };
    }
    if (args.name !== name || !/^[A-Z_]{1,64}$/.test(String(message.error))) return { recorded: false };
    const from = fromOf(message.from);
    for (const note of message.trust ?? []) controller.record("trust", { action: args.action, ...note, ...from });
    for (const r of ledger.records(args, "model", 0, { error: message.error }, from.from))
      controller.record(r.kind, r.data);
    return { recorded: true };
  }

  async function handle(socket: Socket, message: ClientMessage, logger: DaemonLogger): Promise<void> {
    lastActivity = Date.now();
    if (message.type === "ping") {
      const idle = controller.idle;
      writeJsonLine(socket, {
        id: message.id,
        type: "pong",
        pid: process.pid,
        state: controller.state,
        ...(idle ? { idle } : {}),
      });
      return;
    }
    if (message.type === "refused") {
      writeJsonLine(socket, { id: message.id, type: "result", result: refusedCall(message) });
      return;
    }
    if (message.type !== "call") return;
    inFlight++;
    try {
      const { spec, args } = validateAction(message.action);
      if (args.name !== name) {
        throw new ControllerError("CONTROLLER_BAD_INPUT", `this controller serves ${name}, not ${String(args.name)}`);
      }
      // exec-status and logs after a cursor are polls (`pi-sandbox exec` and `logs -f` make two a
      // second): not logged, or they would push everything else out of the log. Errors still are.
      const poll = args.action === "exec-status" || (args.action === "logs" && args.cursor !== undefined);
      if (!poll) logger.info(`action ${args.action}`);
      if (!poll) traceMark(`daemon: action ${args.action}`);
      const gone = new AbortController();
      const onClose = () => gone.abort(new Error("the caller went away"));
      socket.once("close", onClose);
      const started = performance.now();
      // As the client says; a model's call carries a guard whatever it says.
      const caller = message.guard ? "model" : (message.caller ?? "library");
      // The model's client refuses what is the user's only (egress answers, shell); so does the daemon.
      if (caller === "model" && spec.userOnly) {
        throw new ControllerError("CONTROLLER_USER_ONLY", `${spec.name} is for the user, not the model`);
      }
      const from = fromOf(message.from);
      for (const note of message.trust ?? []) controller.record("trust", { action: args.action, ...note, ...from });
      const record = (outcome: { result: unknown } | { error: string }) => {
        // A poll that found nothing new is not an action of its own; what it reports (an exec's end) is.
        const records = ledger.records(args, caller, performance.now() - started, outcome, from.from);
        for (const r of poll && "result" in outcome && records.length === 1 ? [] : records)
          controller.record(r.kind, r.data);
      };
      const result = await controller
        .call(args, {
          guard: parseHostGuard(message.guard),
          progress: (event) => {
            // A copy's byte ticks go to the caller only: they would flood the log.
            if (event.done === undefined) logger.info(`[${event.stage}] ${event.message}`);
            if (event.done === undefined) traceMark(`daemon: [${event.stage}] ${event.message}`);
            writeJsonLine(socket, { id: message.id, type: "progress", event });
          },
          signal: gone.signal,
          caller,
        })
        .finally(() => socket.off("close", onClose))
        .catch((error: unknown) => {
          record({ error: toControllerError(error).code });
          throw error;
        });
      record({ result });
      writeJsonLine(socket, { id: message.id, type: "result", result });
      if (!poll) traceMark(`daemon: ${args.action} answered`);
    } catch (error) {
      const e = toControllerError(error);
      logger.warn(`${e.code}: ${e.message}`);
      writeJsonLine(socket, { id: message.id, type: "error", error: e.toJSON() });
    } finally {
      inFlight--;
      lastActivity = Date.now();
      lastCall = lastActivity;
    }
  }

  await listenPrivate(server, socketPath);
  const socketIdentity = await fileIdentity(socketPath);
  log.info(`controller ${process.pid} listening on ${socketPath}`);
  traceMark("daemon: listening");

  const onSignal = (signal: string) => {
    log.info(`${signal}: stopping cleanly`);
    void controller.shutdown();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  process.on("SIGHUP", () => undefined);

  const idle = setInterval(() => {
    controller.checkVm();
    controller.checkIdle();
    void controller.checkStateDir();
    // An instance that suspended itself, unused since: its previews go to the waker and this daemon
    // exits (parking.ts). One that cannot be parked keeps its daemon, which holds the previews.
    // Quiet since the last call and since the suspend itself: a request right after the suspend
    // (the one most likely to come) finds this daemon, not a hand-over under way.
    const now = Date.now();
    asleepSince = controller.asleep ? (asleepSince ?? now) : undefined;
    const spell = options.idleExitMs ?? IDLE_EXIT_MS;
    const quiet = now - lastCall > spell && asleepSince !== undefined && now - asleepSince > spell;
    if (controller.asleep && !controller.busy && inFlight === 0 && quiet && now >= parkAt) {
      parkAt = Number.POSITIVE_INFINITY;
      void controller.park().then((parked) => (parkAt = parked === false ? Date.now() + PARK_RETRY_MS : 0));
    }
    if (
      !controller.running &&
      !controller.asleep &&
      !controller.busy &&
      inFlight === 0 &&
      Date.now() - lastActivity > (options.idleExitMs ?? IDLE_EXIT_MS)
    ) {
      log.info("idle with nothing running; exiting");
      void controller.shutdown();
    }
  }, 1000);

  await controller.finished;
  // No VM runs any more. Give the entry up first, so a client arriving now spawns a fresh
  // daemon instead of talking to this one; then let in-flight answers (the stop or destroy
  // result itself) reach their callers.
  clearInterval(idle);
  // Closing a listening Unix socket unlinks its path (libuv does): once a newer daemon listens
  // there, this one's handle is only unreferenced (the process is about to exit) instead.
  if ((await fileIdentity(socketPath)) === socketIdentity) server.close();
  else server.unref();
  await removeIfOwn(pidFile, pidFileIdentity);
  for (let i = 0; i < 50 && inFlight > 0; i++) await new Promise((r) => setTimeout(r, 100));
  for (const socket of sockets) socket.end();
  await new Promise((r) => setTimeout(r, 100));
  for (const socket of sockets) socket.destroy();
  log.info("controller exiting");
  return 0;
}
