// The state directory: its root, and the one place that names the controller's files and sockets.
import { createHash } from "node:crypto";
import { lstat, mkdir, stat } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { assertValidInstanceName, isConfigError } from "@pi-sandbox/config/core";
import { ControllerError } from "../errors.js";

/** The two name spaces under the state root. */
export type EntryKind = "instances" | "templates";

/** Unix socket paths longer than this fail on macOS (104) and Linux (108); keep a margin. */
const SOCKET_PATH_MAX = 100;

/**
 * Resolves the state root at call time: `$PI_SANDBOX_HOME`, else `$XDG_STATE_HOME/pi-sandbox`,
 * else `~/.local/state/pi-sandbox`.
 */
export function resolveStateRoot(env: NodeJS.ProcessEnv = process.env): string {
  if (env.PI_SANDBOX_HOME) return resolve(env.PI_SANDBOX_HOME);
  if (env.XDG_STATE_HOME) return resolve(env.XDG_STATE_HOME, "pi-sandbox");
  return join(env.HOME ?? homedir(), ".local", "state", "pi-sandbox");
}

/**
 * Throws CONTROLLER_INVALID_NAME unless `name` is a valid instance/template name: config's check
 * (`assertValidInstanceName`), its message and hint, under the controller's code.
 */
export function assertName(name: unknown, kind = "instance"): asserts name is string {
  try {
    assertValidInstanceName(name, kind);
  } catch (error) {
    if (!isConfigError(error)) throw error;
    throw new ControllerError("CONTROLLER_INVALID_NAME", error.message, {
      hint: error.hint,
      details: error.details,
      cause: error,
    });
  }
}

/**
 * Every file name the controller uses, in one place. Paths are derived, never stored, so a
 * renamed state root keeps working.
 */
export class StateLayout {
  /** Absolute state root. */
  readonly root: string;
  readonly #tmpDir: string | undefined;

  /** `options.tmpDir` is where long socket paths move; default `os.tmpdir()` at call time. */
  constructor(root: string, options: { tmpDir?: string } = {}) {
    this.root = resolve(root);
    this.#tmpDir = options.tmpDir === undefined ? undefined : resolve(options.tmpDir);
  }

  /** The layout for the root (and `$TMPDIR`) resolved from the environment. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): StateLayout {
    return new StateLayout(resolveStateRoot(env), env.TMPDIR ? { tmpDir: env.TMPDIR } : {});
  }

  /** Creates the root (mode 0700) if missing and refuses a group- or world-accessible one. */
  async ensurePrivate(): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    const info = await stat(this.root);
    if (!info.isDirectory()) {
      throw new ControllerError("CONTROLLER_STATE_INSECURE", `state root ${this.root} is not a directory`, {
        hint: "Point PI_SANDBOX_HOME at a private directory.",
        details: { root: this.root },
      });
    }
    if ((info.mode & 0o077) !== 0) {
      const mode = (info.mode & 0o777).toString(8);
      throw new ControllerError(
        "CONTROLLER_STATE_INSECURE",
        `state root ${this.root} has mode ${mode}; it must be private (0700) because it holds VM disks and sockets`,
        { hint: `Run: chmod 700 ${this.root}`, details: { root: this.root, mode } },
      );
    }
    if (typeof process.getuid === "function" && info.uid !== process.getuid()) {
      throw new ControllerError("CONTROLLER_STATE_INSECURE", `state root ${this.root} belongs to another user`, {
        hint: "Set PI_SANDBOX_HOME to a directory you own.",
        details: { root: this.root, uid: info.uid },
      });
    }
    await mkdir(this.kindDir("instances"), { recursive: true, mode: 0o700 });
    await mkdir(this.kindDir("templates"), { recursive: true, mode: 0o700 });
  }

  /** `instances/` or `templates/`. */
  kindDir(kind: EntryKind): string {
    return join(this.root, kind);
  }

  /** Directory of one named entry; validates the name first. */
  entryDir(kind: EntryKind, name: string): string {
    assertName(name);
    return join(this.kindDir(kind), name);
  }

  /** Captured config, creation time, template origin. */
  recordFile(kind: EntryKind, name: string): string {
    return join(this.entryDir(kind, name), "record.json");
  }

  /** Last status written by the daemon. */
  statusFile(kind: EntryKind, name: string): string {
    return join(this.entryDir(kind, name), "status.json");
  }

  /** The guest agent's TCP door of the entry's last boot (`daemon/agent-door.ts`). */
  agentDoorFile(kind: EntryKind, name: string): string {
    return join(this.entryDir(kind, name), "agent-door.json");
  }

  /** Guest ports and preview host ports, leased once. */
  portsFile(name: string): string {
    return join(this.entryDir("instances", name), "ports.json");
  }

  /**
   * Claims of preview loopback addresses: one file per address (`addresses/127.a.b.c`), created
   * exclusively, holding the name of the instance that owns it. See `daemon/preview-address.ts`.
   */
  addressesDir(): string {
    return join(this.root, "addresses");
  }

  /** The claim file of one preview address. */
  addressClaimFile(address: string): string {
    if (!/^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$/.test(address)) {
      throw new ControllerError("CONTROLLER_BAD_INPUT", `${JSON.stringify(address)} is not a preview address`, {
        details: { address },
      });
    }
    return join(this.addressesDir(), address);
  }

  /** Daemon pid file. */
  pidFile(kind: EntryKind, name: string): string {
    return join(this.entryDir(kind, name), "daemon.pid");
  }

  /** Controller log (rotated by the daemon). */
  logFile(kind: EntryKind, name: string): string {
    return join(this.entryDir(kind, name), "controller.log");
  }

  /** Where the controller log of a failed create is kept after the half-made instance is removed. */
  failedCreateLogFile(name: string): string {
    assertName(name);
    return join(this.root, "logs", `${name}.create-failed.log`);
  }

  /**
   * The dashboard's record (`dashboard.json`, 0600): its pid and start time, its port, and the key
   * its links' tokens are signed with. Created exclusively by the one dashboard of this state root.
   */
  dashboardFile(): string {
    return join(this.root, "dashboard.json");
  }

  /** The dashboard's own log (what it served, refused and why), rotated like a controller log. */
  dashboardLogFile(): string {
    return join(this.root, "logs", "dashboard.log");
  }

  /** The user's trust of one sandbox.yaml that reaches the host, by its trust key (a sha256). */
  trustFile(key: string): string {
    if (!/^[0-9a-f]{64}$/.test(key)) throw new ControllerError("CONTROLLER_BAD_INPUT", "not a sha256 digest");
    return join(this.root, "trust", `${key}.json`);
  }

  /** The entry's ledger (state/ledger.ts): what was done to it, written only by its controller. */
  ledgerDir(kind: EntryKind, name: string): string {
    return join(this.entryDir(kind, name), "ledger");
  }

  /**
   * Where a destroyed entry's ledger is kept, under the time of the destroy (`stamp`, ISO time
   * without separators): `ledgers/<kind>/<name>.<stamp>`, until the user removes it.
   */
  keptLedgerDir(kind: EntryKind, name: string, stamp: string): string {
    assertName(name);
    if (!/^[0-9TZ]+$/.test(stamp)) throw new ControllerError("CONTROLLER_BAD_INPUT", "not a ledger time stamp");
    return join(this.keptLedgersDir(kind), `${name}.${stamp}`);
  }

  /**
   * This machine's ledger of what it sent through context `context` (a name contexts.ts checked):
   * `contexts/<context>/ledger`, written by every process calling through it, kept after `context rm`.
   */
  contextLedgerDir(context: string): string {
    return join(this.root, "contexts", context, "ledger");
  }

  /** Where the ledgers of destroyed entries of `kind` are kept (see keptLedgerDir). */
  keptLedgersDir(kind: EntryKind): string {
    return join(this.root, "ledgers", kind);
  }

  /**
   * The hosts the user allowed an instance to reach beyond its allowedHosts (state/egress.ts):
   * host state, never in any sandbox.yaml, written only on the user's answer.
   */
  egressGrantsFile(name: string): string {
    return join(this.entryDir("instances", name), "egress-grants.json");
  }

  /** The requests an instance's daemon holds for the user's answer, rewritten as they come and go. */
  egressAsksFile(name: string): string {
    return join(this.entryDir("instances", name), "egress-asks.json");
  }

  /** Who can answer an instance's egress asks now: one file per Pi session or dashboard, touched while it looks. */
  egressAnswerersDir(name: string): string {
    return join(this.entryDir("instances", name), "egress-answerers");
  }

  /** Directory owned by the vm package's disk store. */
  diskDir(kind: EntryKind, name: string): string {
    return join(this.entryDir(kind, name), "disk");
  }

  /** Gondolin cache/session/tmp dirs, isolated per state root. */
  runtimeDir(): string {
    return join(this.root, "runtime");
  }

  /**
   * The guest agent's first-boot seeds (the supervisor's writeAgentSeed): one directory per agent
   * and placement, shared read-only with each new disk's first boot (those nobody wrote for a day
   * are removed as another is written).
   */
  agentSeedsDir(): string {
    return join(this.root, "agent-seeds");
  }

  /**
   * The daemon's Unix socket. Inside the entry directory when the path fits the platform limit,
   * else in a short per-user directory under the temp dir, named by a hash of the long path.
   * The daemon creates its directory with {@link ensurePrivateDir}; clients check it with
   * {@link assertPrivateDir}, because another local user can create `/tmp/pi-sandbox-<uid>` first.
   */
  socketPath(kind: EntryKind, name: string): string {
    return this.#fittingSocket(join(this.entryDir(kind, name), "daemon.sock"));
  }

  /**
   * The waker's pid file: the one process of this state root that holds the previews of parked
   * instances (`waker/`), created exclusively by it.
   */
  wakerPidFile(): string {
    return join(this.root, "waker.pid");
  }

  /** The waker's Unix socket (moved under the temp dir as {@link socketPath} is, when too long). */
  wakerSocketPath(): string {
    return this.#fittingSocket(join(this.root, "waker.sock"));
  }

  /** The waker's log: what it held, woke and handed back, and why a wake failed. */
  wakerLogFile(): string {
    return join(this.root, "logs", "waker.log");
  }

  /** `preferred`, or a short per-user path under the temp dir when it would pass the platform limit. */
  #fittingSocket(preferred: string): string {
    if (Buffer.byteLength(preferred) <= SOCKET_PATH_MAX) return preferred;
    const digest = createHash("sha256").update(preferred).digest("hex").slice(0, 24);
    const uid = typeof process.getuid === "function" ? process.getuid() : 0;
    const short = join(this.#tmpDir ?? tmpdir(), `pi-sandbox-${uid}`, `${digest}.sock`);
    if (Buffer.byteLength(short) > SOCKET_PATH_MAX) {
      throw new ControllerError(
        "CONTROLLER_SOCKET_PATH_TOO_LONG",
        `no socket path under ${SOCKET_PATH_MAX} bytes fits`,
        {
          hint: "Set PI_SANDBOX_HOME and TMPDIR to shorter directories.",
          details: { preferred, short },
        },
      );
    }
    return short;
  }
}

/**
 * Throws CONTROLLER_STATE_INSECURE unless `dir` is a real directory (not a symlink) owned by this
 * user with no group or other permissions. Used for every directory that holds a daemon socket:
 * whoever owns that directory can put their own listener where our clients connect.
 */
export async function assertPrivateDir(dir: string): Promise<void> {
  if (typeof process.getuid !== "function") return; // no uids to compare (Windows)
  const uid = process.getuid();
  const info = await lstat(dir);
  const insecure = (problem: string, hint: string, details: Record<string, unknown> = {}) =>
    new ControllerError("CONTROLLER_STATE_INSECURE", `socket directory ${dir} ${problem}`, {
      hint,
      details: { dir, ...details },
    });
  const elsewhere = "or set PI_SANDBOX_HOME (and TMPDIR) to shorter directories you own";
  if (info.isSymbolicLink()) {
    throw insecure("is a symbolic link; it must be a private directory", `Remove the link (rm ${dir}), ${elsewhere}.`);
  }
  if (!info.isDirectory()) {
    throw insecure("is not a directory", `Remove it (rm ${dir}), ${elsewhere}.`);
  }
  if (info.uid !== uid) {
    throw insecure(
      `belongs to uid ${info.uid}, not to you (uid ${uid}); another local user could receive your actions through it`,
      `Have it removed (by root or its owner), ${elsewhere}.`,
      { uid: info.uid },
    );
  }
  if ((info.mode & 0o077) !== 0) {
    const mode = (info.mode & 0o777).toString(8);
    throw insecure(`has mode ${mode}; it must be private (0700)`, `Run: chmod 700 ${dir}`, { mode });
  }
}

/**
 * Creates `dir` with mode 0700 unless it exists, then checks it with {@link assertPrivateDir}.
 * `mkdir` without `recursive` never follows a symlink in the last component (it reports EEXIST),
 * and the check uses `lstat`, so a link planted by someone else is refused, not followed.
 */
export async function ensurePrivateDir(dir: string): Promise<void> {
  try {
    await mkdir(dir, { mode: 0o700 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  await assertPrivateDir(dir);
}
