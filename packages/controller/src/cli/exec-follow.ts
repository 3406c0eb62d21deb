// `pi-sandbox exec` without -d: like `docker exec`, it waits for the command however long it runs.
// The exec action waits at most a minute, so the CLI follows the handle with short exec-status
// calls (each returns only new output) and prints what each brings as it comes.

import type { ExecView } from "../actions/exec.js";

/** How long each exec/exec-status call waits: also how late streamed output can be, in ms. */
export const FOLLOW_POLL_MS = 500;

/** What the follower needs from the CLI; injected so its Ctrl-C logic is testable without a VM. */
export interface FollowIo {
  /** Calls one action; `signal` abandons the wait (the daemon's work goes on). */
  call(action: Record<string, unknown>, signal: AbortSignal): Promise<unknown>;
  /** Writes command output (the CLI escapes control characters). */
  out(text: string): void;
  /** Writes notices, and the command's stderr when the exec keeps it apart. */
  err(text: string): void;
  /** Emits `SIGINT` on Ctrl-C (the process). */
  interrupts: Pick<NodeJS.EventEmitter, "on" | "off">;
  /** Wait of each call, in ms; default {@link FOLLOW_POLL_MS}. */
  pollMs?: number;
}

/** Options of {@link followExec}. */
export interface FollowOptions {
  /** Print one JSON result when following ends (its output the calls' joined) instead of the output. */
  json: boolean;
  /** Stop following after this long and print the handle; default never. */
  timeoutMs?: number;
}

/**
 * Runs an exec action and follows it until the command ends; resolves with the exit code to exit
 * with: the command's (128+N after signal N), or 130 after Ctrl-C. The first Ctrl-C ends the
 * command's process group with exec-kill and keeps following until it is gone; a second one
 * detaches, leaving the command to the guest, and prints its handle.
 */
export async function followExec(
  action: Record<string, unknown> & { name: string },
  options: FollowOptions,
  io: FollowIo,
): Promise<number> {
  const name = action.name;
  const pollMs = io.pollMs ?? FOLLOW_POLL_MS;
  const started = Date.now();
  const detach = new AbortController();
  let handle: string | undefined;
  let interrupts = 0;
  let killing: Promise<void> | undefined;
  // Per stream, a trailing CR is held back until the next chunk, so a CRLF split between two
  // calls stays a line break instead of being escaped as a lone `\r`.
  const pendingCr = { out: "", err: "" };
  // With --json: the last result, holding the output of all.
  let joined: ExecView | undefined;

  const emit = (stream: "out" | "err", chunk: string, running: boolean) => {
    const text = pendingCr[stream] + chunk;
    pendingCr[stream] = text.endsWith("\r") && running ? "\r" : "";
    if (text.length > pendingCr[stream].length) io[stream](pendingCr[stream] ? text.slice(0, -1) : text);
  };
  const write = (view: ExecView) => {
    if (options.json) {
      joined = !joined
        ? view
        : {
            ...view,
            output: joined.output + view.output,
            truncatedBytes: joined.truncatedBytes + view.truncatedBytes,
            ...(view.stderr === undefined
              ? {}
              : {
                  stderr: (joined.stderr ?? "") + view.stderr,
                  stderrTruncatedBytes: (joined.stderrTruncatedBytes ?? 0) + (view.stderrTruncatedBytes ?? 0),
                }),
          };
      return;
    }
    emit("out", view.output, view.running);
    if (view.stderr !== undefined) emit("err", view.stderr, view.running);
  };
  const flush = () => {
    if (joined) io.out(`${JSON.stringify(joined, null, 2)}\n`);
    if (pendingCr.out) io.out(pendingCr.out);
    if (pendingCr.err) io.err(pendingCr.err);
  };
  const kill = () => {
    if (handle === undefined || killing) return;
    killing = io.call({ action: "exec-kill", name, pid: handle }, detach.signal).then(
      () => undefined,
      (error: unknown) => {
        if (!detach.signal.aborted) io.err(`[could not end the command: ${(error as Error).message}]\n`);
      },
    );
  };
  const onInterrupt = () => {
    interrupts++;
    if (interrupts === 1) {
      io.err("\n[interrupted: ending the command; press Ctrl-C again to leave it running]\n");
      kill();
    } else {
      detach.abort(new Error("detached"));
    }
  };
  // The wait of the next call: the poll interval, cut short by --timeout.
  const nextWait = () =>
    options.timeoutMs === undefined
      ? pollMs
      : Math.max(0, Math.min(pollMs, options.timeoutMs - (Date.now() - started)));

  io.interrupts.on("SIGINT", onInterrupt);
  try {
    let view = (await io.call({ ...action, timeoutMs: nextWait() }, detach.signal)) as ExecView;
    handle = view.pid;
    if (interrupts > 0) kill();
    write(view);
    while (view.running) {
      if (options.timeoutMs !== undefined && Date.now() - started >= options.timeoutMs && interrupts === 0) {
        flush();
        if (!options.json) io.out(`[still running; follow with: pi-sandbox exec-status ${name} ${handle}]\n`);
        return 0;
      }
      view = (await io.call(
        { action: "exec-status", name, pid: handle, timeoutMs: nextWait() },
        detach.signal,
      )) as ExecView;
      write(view);
    }
    flush();
    await killing;
    if (interrupts > 0) return 130;
    return view.exitCode ?? 1;
  } catch (error) {
    if (!detach.signal.aborted) throw error;
    flush();
    io.err(
      handle === undefined
        ? "[detached before the command's handle arrived; it may still be running in the guest]\n"
        : `[detached; the command may still be running: pi-sandbox exec-status ${name} ${handle} follows it, pi-sandbox exec-kill ${name} ${handle} ends it]\n`,
    );
    return 130;
  } finally {
    io.interrupts.off("SIGINT", onInterrupt);
  }
}
