// What is there: something listening on a Unix socket or a loopback port, the pid in a pid file,
// which file a path names now. Node built-ins only, so the waker loads it without the state layer.
import { open, readFile, rm, stat, unlink } from "node:fs/promises";
import { connect, type NetConnectOpts, type Socket } from "node:net";

/** Reads a pid file; undefined when missing or garbage. */
export async function readPidFile(path: string): Promise<number | undefined> {
  try {
    const pid = Number.parseInt((await readFile(path, "utf8")).trim(), 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** How a process that takes a pid file tells whether the one named in it still owns it. */
export interface PidFileOwner {
  /** True when process `pid` exists. */
  alive(pid: number): boolean;
  /** True when the owner answers where it serves (its socket). */
  answers(): Promise<boolean>;
  /** How long a live owner may take to start answering before it counts as stale, in ms. */
  patienceMs: number;
}

/**
 * Takes `pidFile` exclusively for this process (written and synced). Returns false when another
 * live process owns it; a stale file (its pid is gone, or alive but never answering) is replaced.
 */
export async function takePidFile(pidFile: string, owner: PidFileOwner): Promise<boolean> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const handle = await open(pidFile, "wx", 0o600);
      await handle.writeFile(`${process.pid}\n`);
      await handle.sync();
      await handle.close();
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const pid = await readPidFile(pidFile);
    if (pid !== undefined && owner.alive(pid)) {
      // A live owner may still be opening its socket; give it a moment before judging it stale.
      for (const deadline = Date.now() + owner.patienceMs; Date.now() < deadline;) {
        if (await owner.answers()) return false;
        await new Promise((r) => setTimeout(r, 100));
      }
      if (owner.alive(pid)) return false;
    }
    await unlink(pidFile).catch(() => undefined);
  }
  return false;
}

/**
 * Which file `path` is now (device, inode and change time, so a reused inode number differs), or
 * undefined when there is none.
 */
export async function fileIdentity(path: string): Promise<string | undefined> {
  const s = await stat(path, { bigint: true }).catch(() => undefined);
  return s && `${s.dev}:${s.ino}:${s.ctimeNs}`;
}

/**
 * Removes `path` if it is still the file `identity` names. An exiting process's pid file and
 * socket may already be its successor's (a destroy, then a create of the same name, spawns the
 * next daemon while this one winds down); removing those would hide the successor from every
 * client and let the next call spawn a second owner.
 */
export async function removeIfOwn(path: string, identity: string | undefined): Promise<void> {
  if (identity !== undefined && (await fileIdentity(path)) === identity) await rm(path, { force: true });
}

/**
 * Connects to `to` and resolves false on an error or after `timeoutMs`; once connected,
 * `onConnect` gets the socket and a `done` to settle with.
 */
export function probeSocket(
  to: string | NetConnectOpts,
  timeoutMs: number,
  onConnect: (socket: Socket, done: (ok: boolean) => void) => void,
): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(typeof to === "string" ? { path: to } : to);
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once("connect", () => onConnect(socket, done));
    socket.once("error", () => done(false));
  });
}

/**
 * True when something accepts connections on the Unix socket `path` within `timeoutMs`. A pid
 * alone can be reused by an unrelated process after a crash; a listening socket in our state dir
 * cannot.
 */
export function socketAccepts(path: string, timeoutMs = 500): Promise<boolean> {
  return probeSocket(path, timeoutMs, (_socket, done) => done(true));
}

/** True when something accepts a TCP connection on 127.0.0.1:`port` within `timeoutMs`. */
export function portAnswers(port: number, timeoutMs = 1000): Promise<boolean> {
  return probeSocket({ host: "127.0.0.1", port }, timeoutMs, (_socket, done) => done(true));
}
