// Setup's commands and output as progress while it runs. The daemon reads the guest's setup log
// every second from a cursor (the agent's run-follow) and turns each step line into `$ <command>`
// and the commands' output into indented lines. The guest writes that log, so every line is cut
// to one line of LINE_CHARS and at most OUTPUT_LINES_PER_READ output lines go out per read (the
// rest is counted); the whole log stays in the guest (inspect's setup.logPath).

import type { SupervisorClient } from "@pi-sandbox/supervisor";
import type { ProgressEvent } from "../wire.js";

/** Pause between reads of the setup log, in ms. */
export const SETUP_POLL_MS = 1000;
/** Output lines sent as progress per read; more are counted in one line. */
export const OUTPUT_LINES_PER_READ = 12;
/** Longest line sent as progress, in characters. */
export const LINE_CHARS = 200;
/** Reads at once while the agent says more is waiting. */
const READS_PER_TICK = 8;

const STEP = /^\[pi-sandbox [^\]]*\] setup step (\d+)\/(\d+): (.*)$/;
const NOTE = /^\[pi-sandbox [^\]]*\] (.*)$/;

function cut(line: string): string {
  const one = line.replace(/\s+$/, "");
  return one.length > LINE_CHARS ? `${one.slice(0, LINE_CHARS - 1)}…` : one;
}

/** Turns setup log text, fed in pieces, into progress events. */
export function setupLogLines(progress: (event: ProgressEvent) => void): {
  push(text: string): void;
  end(): void;
} {
  let partial = "";
  const emit = (lines: string[]) => {
    let shown = 0;
    let skipped = 0;
    for (const line of lines) {
      const step = STEP.exec(line);
      const note = step ? undefined : NOTE.exec(line);
      if (step) progress({ stage: "setup", message: `$ ${cut(step[3]!)} (${step[1]}/${step[2]})` });
      else if (note) {
        // "stopped 0 leftover process(es)" says nothing worth a line.
        if (!/^stopped 0 leftover/.test(note[1]!)) progress({ stage: "setup", message: cut(note[1]!) });
      } else if (shown < OUTPUT_LINES_PER_READ) {
        progress({ stage: "setup", message: `  ${cut(line)}` });
        shown++;
      } else skipped++;
    }
    if (skipped > 0) progress({ stage: "setup", message: `  … ${skipped} more line(s) of output` });
  };
  return {
    push(text) {
      const lines = (partial + text).split(/\r?\n/);
      partial = lines.pop() ?? "";
      // A guest that never ends its line must not grow this buffer.
      if (partial.length > LINE_CHARS) {
        lines.push(partial);
        partial = "";
      }
      emit(lines);
    },
    end() {
      if (partial) emit([partial]);
      partial = "";
    },
  };
}

/**
 * Waits for `run` (the setup request) while streaming the setup log as progress. Reading is best
 * effort: a failed read stops the stream, never the setup.
 */
export async function withSetupProgress<T>(
  supervisor: Pick<SupervisorClient, "followSetup">,
  progress: (event: ProgressEvent) => void,
  run: Promise<T>,
  pollMs = SETUP_POLL_MS,
): Promise<T> {
  const lines = setupLogLines(progress);
  let cursor: string | undefined;
  let broken = false;
  // Until the agent says a run is in progress, what it has is an earlier run's log: skip it.
  const read = async (final: boolean) => {
    for (let i = 0; i < READS_PER_TICK && !broken; i++) {
      const next = await supervisor.followSetup(cursor === undefined ? {} : { cursor }).catch(() => {
        broken = true;
        return undefined;
      });
      if (!next || (!final && !next.running && cursor === undefined)) return;
      cursor = next.cursor;
      lines.push(next.text);
      if (!next.more) return;
    }
  };
  let done = false;
  const settled = run.finally(() => {
    done = true;
  });
  settled.catch(() => undefined);
  while (!done && !broken) {
    await Promise.race([settled.catch(() => undefined), new Promise((resolve) => setTimeout(resolve, pollMs))]);
    if (!done) await read(false);
  }
  const result = await settled;
  await read(true);
  lines.end();
  return result;
}
