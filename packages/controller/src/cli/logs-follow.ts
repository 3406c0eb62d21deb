// `pi-sandbox logs -f`: the tail, then what is written next, until Ctrl-C. The logs action returns
// a cursor with each read; the CLI passes it back, at once while `more` says more is waiting, else
// every half second. The cursor survives the log's rotations and the service's restarts.

/** Pause between reads when nothing more is waiting, in ms. */
export const LOGS_POLL_MS = 500;

/** What the follower needs from the CLI; injected so it is testable without a VM. */
export interface LogsFollowIo {
  /** Calls one action; `signal` abandons the wait. */
  call(action: Record<string, unknown>, signal: AbortSignal): Promise<unknown>;
  /** Writes one read (the module's formatter's text, or a JSON line with --json). */
  print(result: unknown): void;
  /** Writes notices. */
  err(text: string): void;
  /** Emits `SIGINT` on Ctrl-C (the process). */
  interrupts: Pick<NodeJS.EventEmitter, "once" | "off">;
  /** Pause between idle reads, in ms; default {@link LOGS_POLL_MS}. */
  pollMs?: number;
}

interface FollowedRead {
  cursor?: string;
  more?: boolean;
}

/**
 * Follows a log until Ctrl-C (resolves 130) or an error (rejects with it, e.g. when the instance
 * stops). `action` is the logs action with `follow: true`.
 */
export async function followLogs(action: Record<string, unknown>, io: LogsFollowIo): Promise<number> {
  const stop = new AbortController();
  const onInterrupt = () => stop.abort(new Error("interrupted"));
  io.interrupts.once("SIGINT", onInterrupt);
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      stop.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        resolve();
      });
    });
  try {
    let read = (await io.call(action, stop.signal)) as FollowedRead;
    io.print(read);
    const { lines: _lines, follow: _follow, ...rest } = action;
    while (!stop.signal.aborted) {
      if (typeof read.cursor !== "string") throw new Error("the logs result carried no cursor");
      if (!read.more) await pause(io.pollMs ?? LOGS_POLL_MS);
      if (stop.signal.aborted) break;
      read = (await io.call({ ...rest, cursor: read.cursor }, stop.signal)) as FollowedRead;
      io.print(read);
    }
    return 130;
  } catch (error) {
    if (stop.signal.aborted) return 130;
    throw error;
  } finally {
    io.interrupts.off("SIGINT", onInterrupt);
  }
}

/**
 * `logs -f --timestamps` for a service log, whose lines carry no time: returns a function that
 * prefixes each line beginning in `text` with `time` (ISO), or with no `time` only notes where the
 * text ended (the tail, whose lines' times are unknown), so a line split across reads is prefixed
 * once.
 */
export function receivedStamper(): (text: string, time?: Date) => string {
  let atLineStart = true;
  return (text, time) => {
    if (text === "") return text;
    let stamped = "";
    for (const piece of text.split(/(?<=\n)/)) {
      if (atLineStart && time !== undefined) stamped += `${time.toISOString()} `;
      stamped += piece;
      atLineStart = piece.endsWith("\n");
    }
    return stamped;
  };
}
