// A guest's memory saved next to its disk and loaded back: QEMU's migration stream sent over a
// unix socket into a file (QEMU 7.2 has no `file:` migration, and its seccomp sandbox forbids the
// process an `exec:` migration would start), and read back by a new QEMU that the wrapper started
// with `-incoming defer` and the file open on an inherited fd (qemu-process.ts).
import { execFile } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import { createRequire } from "node:module";
import net from "node:net";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import { promisify } from "node:util";
import { writeFileAtomic } from "@pi-sandbox/config";
import { VmError, messageOf } from "../errors.js";
import { linkLayers } from "./disk-layout.js";
import { INCOMING_FD, MEMORY_FILE, MIGRATE_SOCKET, SUSPEND_STATE_FILE, gondolinCertDir } from "../filenames.js";
import { fsyncDir, fsyncFile, readJsonIfExists } from "../fs-util.js";
import type { VfsInodeTable } from "../gondolin-private.js";
import { qemuMemory } from "../host/host-facts.js";
import { QmpCommandError, type QmpMonitor } from "../host/qmp.js";

const POLL_MS = 50;

/** What a saved memory state can only be loaded into: the same QEMU, machine and image. */
export interface SavedMachine {
  /** `qemu-system-* --version`, first line. */
  qemu: string;
  /** `-accel`, `-machine`, `-cpu`. */
  accel: string;
  machineType: string;
  cpu: string;
  /** Guest memory (QEMU syntax) and vCPUs. */
  memory: string;
  cpus: number;
  /** The kernel, initramfs and rootfs the guest booted from, with sizes and times. */
  image: string;
  /** The Gondolin version (its guest helpers hold protocol state in the saved memory). */
  gondolin: string;
  /** The devices our QEMU wrapper adds (`QemuLauncher.devices`); absent without a wrapper and in older states. */
  devices?: string;
}

/** Contents of {@link SUSPEND_STATE_FILE}. */
export interface SuspendState {
  version: 1;
  /** The disk checkpoint taken at the same instant (`DiskPointer.generation`). */
  generation: number;
  /** Size of {@link MEMORY_FILE} in bytes. */
  bytes: number;
  /** ISO time of the suspend. */
  savedAt: string;
  machine: SavedMachine;
  /** Gondolin's file-system inode table at the suspend (see `vfsInodesOf`). */
  vfs?: VfsInodeTable;
}

/**
 * Pauses the guest and streams its memory and device state into `file` (fsynced). The guest stays
 * paused afterwards; QEMU must then be closed. Throws VM_SUSPEND_FAILED.
 */
export async function saveMemory(
  monitor: QmpMonitor,
  runtimeDir: string,
  file: string,
  timeoutMs: number,
): Promise<{ bytes: number; ms: number }> {
  const started = performance.now();
  let sink: MigrationSink | undefined;
  try {
    sink = await migrationSink(runtimeDir, file);
    await monitor.command("stop");
    // QEMU limits migration to 128 MiB/s by default; a local file has no reason for a limit.
    await monitor.command("migrate-set-parameters", { "max-bandwidth": 64 * 1024 ** 3 });
    await monitor.command("migrate", { uri: sink.uri });
    await waitForMigration(monitor, started + timeoutMs);
    const bytes = await sink.written();
    return { bytes, ms: performance.now() - started };
  } catch (error) {
    await fsp.rm(file, { force: true }).catch(() => undefined);
    throw new VmError("VM_SUSPEND_FAILED", `QEMU could not save the guest's memory: ${messageOf(error)}`, {
      cause: error,
      details: { reason: messageOf(error) },
    });
  } finally {
    sink?.close();
  }
}

/** Where QEMU's outgoing migration goes: a unix socket in `runtimeDir` whose one stream is written to `file`. */
export interface MigrationSink {
  /** The `migrate` URI. */
  uri: string;
  /** Once QEMU reported the migration complete: waits for the stream's end, fsyncs `file`, returns its size. */
  written(): Promise<number>;
  close(): void;
}

/** Listens for one migration stream into new file `file` (0600, never an existing one). */
export async function migrationSink(runtimeDir: string, file: string): Promise<MigrationSink> {
  const socketPath = path.join(runtimeDir, MIGRATE_SOCKET);
  const server = net.createServer();
  let received: Promise<void> | undefined;
  server.on("connection", (socket) => {
    if (received) {
      socket.destroy();
      return;
    }
    received = pipeline(socket, fs.createWriteStream(file, { flags: "wx", mode: 0o600 }));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => resolve());
  });
  return {
    uri: `unix:${socketPath}`,
    async written() {
      if (!received) throw new Error("QEMU reported the migration complete without connecting");
      await received;
      await fsyncFile(file);
      return (await fsp.stat(file)).size;
    },
    close: () => void server.close(),
  };
}

/**
 * Loads the saved memory into a QEMU waiting with `-incoming defer` (the wrapper opened the file
 * on fd {@link INCOMING_FD}: QEMU reads it directly, which took a third of the time and none of
 * this process's CPU, compared with feeding it through a socket from here), calls `beforeRun`,
 * and lets the guest run. Throws VM_RESTORE_FAILED when QEMU refuses the stream (another QEMU,
 * machine or a corrupt or missing file) or goes away.
 */
export async function restoreMemory(monitor: QmpMonitor, timeoutMs: number, beforeRun: () => void): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  try {
    if (!(await monitor.connected)) throw new Error("QEMU's monitor did not answer");
    await monitor.command("migrate-incoming", { uri: `fd:${INCOMING_FD}` });
    await waitForMigration(monitor, deadline);
    beforeRun();
    // A guest saved while paused stays paused on arrival (QEMU keeps the source's run state).
    await monitor.command("cont");
  } catch (error) {
    throw new VmError("VM_RESTORE_FAILED", `QEMU could not load the saved memory: ${messageOf(error)}`, {
      cause: error,
      details: { reason: messageOf(error) },
    });
  }
}

/**
 * Waits until QEMU's migration reaches `status` (default `completed`); throws when it fails or is
 * cancelled. A query QEMU leaves unanswered is asked again: it copies the last pages holding its
 * main lock, which keeps its monitor silent for as long as that takes.
 */
export async function waitForMigration(monitor: QmpMonitor, deadline: number, status = "completed"): Promise<void> {
  for (;;) {
    const info = (await monitor.command("query-migrate").catch((error: unknown) => {
      if (error instanceof QmpCommandError && error.outcome === "no-answer" && performance.now() < deadline) return {};
      throw error;
    })) as { status?: unknown; "error-desc"?: unknown };
    if (info.status === status) return;
    if (info.status === "failed" || info.status === "cancelled") {
      throw new Error(typeof info["error-desc"] === "string" ? info["error-desc"] : `migration ${info.status}`);
    }
    if (performance.now() > deadline) throw new Error(`migration still ${String(info.status)} at the deadline`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Publishes a saved memory file and its record; the caller holds the disk. */
export async function writeSuspendState(dir: string, tempFile: string, state: SuspendState): Promise<void> {
  await fsp.rename(tempFile, path.join(dir, MEMORY_FILE));
  await writeFileAtomic(path.join(dir, SUSPEND_STATE_FILE), JSON.stringify(state));
  await fsyncDir(dir);
}

/**
 * The record of the saved memory a rewind links back, written before the rewind's pointer flip and
 * renamed to {@link SUSPEND_STATE_FILE} after it ({@link settleSuspendState}): before the flip no
 * record names the generation the flip creates, so no later checkpoint of that number can ever
 * meet memory saved over another disk.
 */
const PENDING_SUSPEND_STATE_FILE = `${SUSPEND_STATE_FILE}.pending`;

/** Deletes a saved memory state (record first, so a half-deleted state is never taken as whole). */
export async function removeSuspendState(dir: string): Promise<void> {
  await fsp.rm(path.join(dir, PENDING_SUSPEND_STATE_FILE), { force: true });
  await fsp.rm(path.join(dir, SUSPEND_STATE_FILE), { force: true });
  await fsp.rm(path.join(dir, MEMORY_FILE), { force: true });
}

/**
 * Gives `to` the saved memory state of `from` (a template's, or the instance it is made from),
 * recorded for `to`'s disk checkpoint `generation`: the memory file is hard-linked (a clone shares
 * the template's bytes; resuming it later removes only its own link), the record rewritten. Also
 * the disk's MITM CA, which the saved guest already trusts. Nothing happens when `from` has no
 * saved memory for its checkpoint `fromGeneration`. Returns whether memory was linked; the caller
 * holds both disks. `pending`: the record is written as pending, for {@link settleSuspendState}
 * to make it current once `to`'s pointer names `generation`.
 */
export async function linkSuspendState(
  from: string,
  to: string,
  fromGeneration: number,
  generation: number,
  options: { pending?: boolean } = {},
): Promise<boolean> {
  const raw = await readJsonIfExists(path.join(from, SUSPEND_STATE_FILE)).catch(() => undefined);
  const state = raw === undefined ? undefined : parseSuspendState(raw);
  if (!state || state.generation !== fromGeneration) return false;
  await fsp.cp(gondolinCertDir(from), gondolinCertDir(to), { recursive: true, errorOnExist: false }).catch((error) => {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  });
  await linkLayers(from, to, [MEMORY_FILE]);
  const record = options.pending ? PENDING_SUSPEND_STATE_FILE : SUSPEND_STATE_FILE;
  await writeFileAtomic(path.join(to, record), JSON.stringify({ ...state, generation }));
  await fsyncDir(to);
  return true;
}

/**
 * Finishes or drops a rewind's pending memory record (see {@link PENDING_SUSPEND_STATE_FILE}) once
 * the disk's pointer names `generation`: the record of that generation becomes current (the
 * rewind's flip happened), any other is removed with the memory it names (the rewind died before
 * its flip). The caller holds the disk.
 */
export async function settleSuspendState(dir: string, generation: number): Promise<void> {
  const pending = path.join(dir, PENDING_SUSPEND_STATE_FILE);
  const raw = await readJsonIfExists(pending).catch(() => null);
  if (raw === undefined) return;
  if (raw !== null && parseSuspendState(raw)?.generation === generation) {
    await fsp.rename(pending, path.join(dir, SUSPEND_STATE_FILE));
  } else {
    await removeSuspendState(dir);
  }
  await fsyncDir(dir);
}

/** Host bytes of a saved memory state in `dir` (0 when there is none). */
export async function suspendStateBytes(dir: string): Promise<number> {
  let total = 0;
  for (const name of [SUSPEND_STATE_FILE, MEMORY_FILE]) {
    const stat = await fsp.stat(path.join(dir, name)).catch(() => undefined);
    if (stat?.isFile()) total += stat.blocks * 512;
  }
  return total;
}

/** What {@link checkSuspendState} decided. */
export type SavedMemory =
  { usable: true; state: SuspendState; file: string } | { usable: false; reason: string } | undefined;

/**
 * Reads the saved memory state of `dir` and checks that it can be loaded into the machine about
 * to boot the disk checkpoint `generation`. Undefined when nothing was saved; otherwise usable, or
 * the reason it is not (a different QEMU, accelerator, CPU model, memory size or image, another
 * checkpoint, a missing or truncated memory file).
 */
export async function checkSuspendState(dir: string, generation: number, machine: SavedMachine): Promise<SavedMemory> {
  const raw = await readJsonIfExists(path.join(dir, SUSPEND_STATE_FILE)).catch(() => null);
  const file = path.join(dir, MEMORY_FILE);
  if (raw === undefined) {
    return fs.existsSync(file) ? { usable: false, reason: "the memory file has no record of its suspend" } : undefined;
  }
  const state = parseSuspendState(raw);
  if (!state) return { usable: false, reason: "the record of the suspend is unreadable" };
  if (state.generation !== generation) {
    return { usable: false, reason: "the saved memory belongs to another disk checkpoint" };
  }
  const stat = await fsp.stat(file).catch(() => undefined);
  if (!stat) return { usable: false, reason: "the memory file is missing" };
  if (stat.size !== state.bytes) return { usable: false, reason: "the memory file is truncated or changed" };
  const saved = state.machine;
  if (saved.qemu !== machine.qemu) {
    return { usable: false, reason: `QEMU changed (saved by ${saved.qemu}, now ${machine.qemu})` };
  }
  if (saved.accel !== machine.accel || saved.machineType !== machine.machineType || saved.cpu !== machine.cpu) {
    return {
      usable: false,
      reason: `the accelerator or CPU model changed (saved on ${saved.accel}/${saved.machineType}/${saved.cpu}, now ${machine.accel}/${machine.machineType}/${machine.cpu})`,
    };
  }
  if (saved.memory !== machine.memory || saved.cpus !== machine.cpus) {
    return { usable: false, reason: "the memory size or CPU count changed" };
  }
  if (saved.image !== machine.image) return { usable: false, reason: "the guest image changed" };
  if (saved.gondolin !== machine.gondolin) return { usable: false, reason: "the Gondolin version changed" };
  if (saved.devices !== machine.devices) {
    return {
      usable: false,
      reason: `the VM's devices changed (saved with ${saved.devices ?? "none"}, now ${machine.devices ?? "none"})`,
    };
  }
  return { usable: true, state, file };
}

function parseSuspendState(raw: unknown): SuspendState | undefined {
  if (!raw || typeof raw !== "object") return undefined;
  const value = raw as Partial<SuspendState>;
  const machine = value.machine as Partial<SavedMachine> | undefined;
  const strings = ["qemu", "accel", "machineType", "cpu", "memory", "image", "gondolin"] as const;
  if (
    value.version !== 1 ||
    !Number.isSafeInteger(value.generation) ||
    !Number.isSafeInteger(value.bytes) ||
    !machine ||
    !strings.every((key) => typeof machine[key] === "string") ||
    (machine.devices !== undefined && typeof machine.devices !== "string") ||
    !Number.isSafeInteger(machine.cpus)
  ) {
    return undefined;
  }
  const vfs = value.vfs;
  const vfsOk =
    vfs === undefined ||
    (Number.isSafeInteger(vfs.nextIno) &&
      Array.isArray(vfs.entries) &&
      vfs.entries.every(
        (entry) =>
          Array.isArray(entry) &&
          Number.isSafeInteger(entry[0]) &&
          Array.isArray(entry[1]) &&
          entry[1].every((p) => typeof p === "string"),
      ));
  return vfsOk ? (value as SuspendState) : undefined;
}

const versions = new Map<string, Promise<string>>();

/** The first line of `<emulator> --version`, once per emulator per process. */
export function qemuVersionOf(emulatorPath: string): Promise<string> {
  let version = versions.get(emulatorPath);
  if (!version) {
    version = promisify(execFile)(emulatorPath, ["--version"], { timeout: 10_000 }).then(
      ({ stdout }) => stdout.split("\n")[0]!.trim(),
      () => `unknown QEMU at ${emulatorPath}`,
    );
    versions.set(emulatorPath, version);
  }
  return version;
}

/** The identity of the boot files, for {@link SavedMachine.image}. */
export async function imageIdentity(image: {
  kernelPath: string;
  initrdPath: string;
  rootfsPath: string;
}): Promise<string> {
  const parts: string[] = [];
  for (const file of [image.kernelPath, image.initrdPath, image.rootfsPath]) {
    const stat = await fsp.stat(file).catch(() => undefined);
    parts.push(`${file}:${stat?.size ?? "missing"}:${stat?.mtimeMs ?? 0}`);
  }
  return parts.join("|");
}

/** The installed Gondolin's version, for {@link SavedMachine.gondolin}. */
export function gondolinVersion(): string {
  try {
    const manifest = createRequire(import.meta.url)("@earendil-works/gondolin/package.json") as { version?: unknown };
    return String(manifest.version);
  } catch {
    return "unknown";
  }
}

/** The {@link SavedMachine} of a boot. */
export async function savedMachineOf(
  launcher: { emulatorPath: string; devices?: string },
  accelerator: { accel: string; machineType: string; cpu: string },
  resources: { cpus: number; memoryGiB: number },
  image: { kernelPath: string; initrdPath: string; rootfsPath: string },
): Promise<SavedMachine> {
  return {
    qemu: await qemuVersionOf(launcher.emulatorPath),
    accel: accelerator.accel,
    machineType: accelerator.machineType,
    cpu: accelerator.cpu,
    memory: qemuMemory(resources.memoryGiB),
    cpus: resources.cpus,
    image: await imageIdentity(image),
    gondolin: gondolinVersion(),
    ...(launcher.devices !== undefined ? { devices: launcher.devices } : {}),
  };
}
