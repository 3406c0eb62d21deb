// Whether an entry's directory is still the one its daemon started with. Removed (or replaced)
// under a running daemon (a temp cleaner, a hasty `rm -rf` of the state root), it takes the disk,
// the status and the socket with it: no command can reach that daemon again, and its VM would run
// on unseen. The daemon looks every few seconds and, when it is gone, says so where it still can.
import { stat } from "node:fs/promises";
import { systemLog } from "../log.js";
import type { InstanceState } from "./state.js";

/** How often the daemon looks whether its entry's directory is still there. */
export const ENTRY_DIR_LOOK_MS = 10_000;

/** Looks at one directory now and then; remembers which one it was at the first look. */
export class EntryDirWatch {
  #identity: string | undefined;
  #lookedAt = 0;

  constructor(private readonly dir: string) {}

  /** True when a look is due at `now` and finds the directory gone or replaced. */
  async gone(now: number): Promise<boolean> {
    if (now - this.#lookedAt < ENTRY_DIR_LOOK_MS) return false;
    this.#lookedAt = now;
    const info = await stat(this.dir).catch(() => undefined);
    const identity = info && `${info.dev}:${info.ino}`;
    this.#identity ??= identity;
    return identity === undefined || identity !== this.#identity;
  }
}

/** Says that the entry's directory is gone: in its log (if any is left), on stderr and in the system log. */
export async function reportEntryDirGone(state: InstanceState): Promise<void> {
  const what = state.kind === "templates" ? "template" : "instance";
  const dir = state.layout.entryDir(state.kind, state.name);
  const message = `pi-sandbox: the state directory of ${what} ${state.name} (${dir}) was removed while its controller ran; its VM is stopped and its disk is gone with the directory`;
  state.log.warn(message);
  process.stderr.write(`${message}\n`);
  await systemLog(message);
}
