// A runtime for fast tests of the daemon's logic: the "VM" is host processes in a directory
// (`createLocalGuestVm`), the agent is the real Python agent running on the host, previews are
// real localhost listeners, and a "disk" is a directory. No QEMU. A `suspend` ends the "VM"'s
// execs (the agent's bridge) but leaves the processes they started (the agent daemon, its
// services, background commands) running, with a marker file in the disk directory: the next
// boot of that disk in the same runtime "resumes" them (`restore` warm), as a real resume finds
// them in memory. A marker without those processes (another runtime, or the test deleted them)
// gives a cold boot with the reason, as a real start whose saved memory cannot be used.

import { randomBytes } from "node:crypto";
import { cp, lstat, mkdir, readFile, readdir, readlink, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { JsonFilePortLeaseStore, PreviewGateway, guestVmConnector } from "@pi-sandbox/ingress";
import { DEFAULT_AGENT_PATH, DEFAULT_AGENT_STATE_DIR, SupervisorClient } from "@pi-sandbox/supervisor";
import { POINTER_FILE, VmError, type EgressApprover, type EgressEvent, type EgressRequest } from "@pi-sandbox/vm";
import { createLocalGuestVm, type LocalGuestVm } from "@pi-sandbox/vm/testing";
import type { InstanceRuntime, KeepOptions, KeptCheckpoint, KeptCheckpointInfo, RuntimeVm } from "./daemon/runtime.js";

/** A booted local "VM" of the local runtime. */
export type LocalRuntimeVm = RuntimeVm & {
  readonly local: LocalGuestVm;
  /** The value the host holds for a secret now (what Gondolin would substitute), for assertions. */
  secretValue(name: string): string | undefined;
};

/** Hooks of the local runtime, for failures and races. */
export interface LocalRuntimeHooks {
  /** Called before each boot; a thrown error fails it. */
  beforeBoot?: (name: string, diskDir: string) => void | Promise<void>;
  /** Called before each agent start; a thrown error fails it. */
  beforeAgent?: (name: string) => void | Promise<void>;
  /** Called at the start of each stop of a VM (awaited: a test can hold the stop there). */
  beforeStop?: (name: string) => void | Promise<void>;
  /** Called by each checkpoint of a running VM; a thrown error fails it (the VM runs on). */
  onCheckpoint?: (name: string) => void | Promise<void>;
  /** What a VM's `diskWrittenAtMs` reads (default: undefined, unknown). */
  diskWrittenAtMs?: (name: string) => number | undefined;
}

/** The local runtime with its counters. */
export interface LocalRuntime extends InstanceRuntime {
  /** Boots begun. */
  boots: number;
  /** VMs booted and not yet stopped, suspended or closed. */
  readonly live: Set<LocalRuntimeVm>;
  /** Suspended VMs by disk directory, their processes still running; `close()` ends them. */
  readonly suspended: Map<string, LocalRuntimeVm>;
  /** Hooks; change them between calls. */
  hooks: LocalRuntimeHooks;
  /** Names given to copies of templates, in order (these "guests" are host processes: nothing else changes). */
  readonly identities: string[];
  /** The checkpoints taken of running VMs, in order: whose, and when (ms since the epoch). */
  readonly checkpoints: { name: string; at: number }[];
  /**
   * A guest request to a host off the instance's allowedHosts, decided as the VM's egress policy
   * would (asked of the daemon's approver, the decision told to its egress record); resolves
   * with whether it went through. Refused when the last boot of `name` had no approver. With
   * `bytes`, a request that went through is then reported as an exchange that carried them.
   */
  guestRequest(name: string, request: EgressRequest, bytes?: { bytesOut: number; bytesIn: number }): Promise<boolean>;
}

/** The local runtime. `hooks` may be changed later through the returned object. */
export function createLocalRuntime(hooks: LocalRuntimeHooks = {}): LocalRuntime {
  const live = new Set<LocalRuntimeVm>();
  const suspended = new Map<string, LocalRuntimeVm>();
  const egress = new Map<string, { approve?: EgressApprover; onEgress?: (event: EgressEvent) => void }>();
  const runtime: LocalRuntime = {
    async guestRequest(name, request, bytes) {
      const { approve, onEgress } = egress.get(name) ?? {};
      const verdict = approve ? await approve(request) : { allowed: false, rule: "not in allowedHosts" as const };
      onEgress?.({ kind: "request", ...request, ...verdict });
      if (verdict.allowed && bytes) onEgress?.({ kind: "bytes", ...request, ...bytes });
      return verdict.allowed;
    },
    boots: 0,
    identities: [],
    checkpoints: [],
    live,
    suspended,
    hooks,
    disks: {
      async createDisk(dir) {
        if (await exists(dir)) throw new VmError("VM_DISK_EXISTS", `a disk exists in ${dir}`, { details: { dir } });
        await mkdir(join(dir, "root"), { recursive: true });
        await writeFile(join(dir, POINTER_FILE), JSON.stringify({ kind: "local" }));
      },
      // Host processes cannot be copied: these templates never carry a running guest.
      async createFromTemplate(templateDir, dir) {
        await cp(templateDir, dir, { recursive: true, filter: notSocket });
        return { memoryBytes: 0 };
      },
      async createTemplate(dir, templateDir) {
        // A suspended source's agent still listens on its socket: sockets are not copied.
        await cp(dir, templateDir, { recursive: true, filter: notSocket });
        return { memoryBytes: 0 };
      },
      async destroy(dir) {
        if (!(await exists(dir))) throw new VmError("VM_DISK_NOT_FOUND", `no disk in ${dir}`, { details: { dir } });
        await suspended.get(dir)?.close();
        await rm(dir, { recursive: true, force: true });
      },
      async dropSavedMemory(dir) {
        await suspended.get(dir)?.close();
        suspended.delete(dir);
        await rm(join(dir, LOCAL_SUSPEND_MARKER), { force: true });
      },
      checkpoints: (dir) => localCheckpoints(dir),
      keepCheckpoint: (dir, options) => keepLocal(dir, options),
      async removeCheckpoint(dir, id) {
        const kept = (await localCheckpoints(dir)).find((k) => k.id === id);
        if (!kept) throw new VmError("VM_CHECKPOINT_NOT_FOUND", `no checkpoint ${id}`, { details: { dir, id } });
        await rm(join(dir, LOCAL_CHECKPOINTS, id), { recursive: true, force: true });
        return kept;
      },
      // The files come back; processes cannot: a memory checkpoint's rewind boots cold, saying why.
      async rewind(dir, id) {
        const kept = (await localCheckpoints(dir)).find((k) => k.id === id);
        if (!kept) throw new VmError("VM_CHECKPOINT_NOT_FOUND", `no checkpoint ${id}`, { details: { dir, id } });
        await rm(join(dir, "root"), { recursive: true, force: true });
        await cp(join(dir, LOCAL_CHECKPOINTS, id, "root"), join(dir, "root"), { recursive: true, filter: notSocket });
        if (kept.memory) await writeFile(join(dir, LOCAL_SUSPEND_MARKER), "");
        else await rm(join(dir, LOCAL_SUSPEND_MARKER), { force: true });
        return kept;
      },
      async fork(sourceDir, dir, options = {}) {
        const from =
          options.checkpoint === undefined ? sourceDir : join(sourceDir, LOCAL_CHECKPOINTS, options.checkpoint);
        if (!(await exists(from))) {
          throw new VmError("VM_CHECKPOINT_NOT_FOUND", `no checkpoint ${options.checkpoint}`, {
            details: { dir: sourceDir },
          });
        }
        await mkdir(dir, { recursive: true });
        await cp(join(from, "root"), join(dir, "root"), { recursive: true, filter: notSocket });
        await writeFile(join(dir, POINTER_FILE), JSON.stringify({ kind: "local" }));
        return { memoryBytes: 0 };
      },
    },
    async bootVm({ name, diskDir, secrets, onProgress, onEgress, approveEgress }) {
      runtime.boots++;
      egress.set(name, { ...(approveEgress ? { approve: approveEgress } : {}), ...(onEgress ? { onEgress } : {}) });
      const started = performance.now();
      await runtime.hooks.beforeBoot?.(name, diskDir);
      if (!(await exists(join(diskDir, POINTER_FILE)))) {
        throw new VmError("VM_DISK_NOT_FOUND", `no disk in ${diskDir}`, { details: { dir: diskDir } });
      }
      // The guest's environment holds each secret's placeholder, as Gondolin's would, and none of
      // the host variables that hold a value (this "guest" would inherit them otherwise).
      const hidden = new Set(Object.values(secrets).map((secret) => secret.value));
      const env: Record<string, string | undefined> = Object.fromEntries(
        Object.entries(process.env).filter(([, value]) => value === undefined || !hidden.has(value)),
      );
      for (const [key, secret] of Object.entries(secrets)) env[key] = secret.placeholder;
      const local = await createLocalGuestVm({ root: join(diskDir, "root"), name, env });
      const marker = join(diskDir, LOCAL_SUSPEND_MARKER);
      // A run that never stopped, suspended or closed: its owner died. The files are all there
      // (nothing is lost on the host), so it is "recovered", as a real disk's run layer would be.
      const runMarker = join(diskDir, LOCAL_RUN_MARKER);
      const interruptedAt = await stat(runMarker).then(
        (info) => info.mtime.toISOString(),
        () => undefined,
      );
      await writeFile(runMarker, "");
      const recovery: LocalRuntimeVm["recovery"] = interruptedAt
        ? { outcome: "recovered", lastWriteAt: interruptedAt, reopened: { generation: 0, at: interruptedAt } }
        : undefined;
      const frozen = suspended.get(diskDir);
      suspended.delete(diskDir);
      let restore: LocalRuntimeVm["restore"];
      if (frozen) restore = { warm: true, restoreMs: 0 };
      else if (await exists(marker)) restore = { warm: false, reason: "the suspended processes are gone" };
      await rm(marker, { force: true });
      if (restore && !restore.warm)
        onProgress(`the saved memory was not used (${restore.reason}); booting the same disk checkpoint cold`);
      const values = new Map(Object.entries(secrets).map(([key, secret]) => [key, secret.value]));
      const bootMs = performance.now() - started;
      let stopping = false;
      let generation = 0;
      const vm: LocalRuntimeVm = {
        name,
        local,
        accelerator: { accel: "local", reason: "host processes (tests)" },
        warnings: [],
        bootMs,
        fault: undefined,
        restore,
        recovery,
        get hostPid() {
          return local.hostPid;
        },
        get closed() {
          return local.closed;
        },
        exec: (command, options) => local.exec(command, options),
        readFile: (file, options) => local.readFile(file, options),
        writeFile: (file, data, options) => local.writeFile(file, data, options),
        connectTcp: (port, options) => local.connectTcp(port, options),
        enableSsh: (options) => local.enableSsh(options),
        secretValue: (key) => values.get(key),
        updateSecret(key, value) {
          if (!values.has(key)) {
            throw new VmError("VM_SECRET_INVALID", `no secret named ${key} was given to this VM`, {
              details: { secret: key },
            });
          }
          values.set(key, value);
        },
        // A "checkpoint" of host files changes nothing: it only counts, as a real one would publish.
        async checkpoint(options) {
          if (stopping || local.closed) {
            throw new VmError("VM_CLOSED", `the VM ${name} is stopping or closed`, { details: { name } });
          }
          await runtime.hooks.onCheckpoint?.(name);
          runtime.checkpoints.push({ name, at: Date.now() });
          const outcome = { generation: ++generation, changed: true, stallMs: 0, totalMs: 0, bytes: 0 };
          return options?.keep ? { ...outcome, kept: await keepLocal(diskDir, options.keep) } : outcome;
        },
        get diskWrittenAtMs() {
          return runtime.hooks.diskWrittenAtMs?.(name);
        },
        async stop() {
          const t = performance.now();
          stopping = true;
          await runtime.hooks.beforeStop?.(name);
          live.delete(vm);
          await powerOff(local);
          await rm(runMarker, { force: true });
          return { totalMs: performance.now() - t };
        },
        async suspend() {
          const t = performance.now();
          live.delete(vm);
          await local.close();
          suspended.set(diskDir, vm);
          await writeFile(marker, "");
          await rm(runMarker, { force: true });
          return { totalMs: performance.now() - t, memoryBytes: 0 };
        },
        async close(options) {
          live.delete(vm);
          if (suspended.get(diskDir) === vm) suspended.delete(diskDir);
          await powerOff(local);
          if (!options?.keepRun) await rm(runMarker, { force: true });
        },
      };
      live.add(vm);
      return vm;
    },
    // A new guest's identity is never sent with this agent's hello: it runs on the host, whose /etc
    // it would write. The lifecycle then asks giveOwnIdentity, recorded below.
    async startAgent(vm, { workspace, logger, door }) {
      await runtime.hooks.beforeAgent?.(String((vm as LocalRuntimeVm).local.name));
      const local = (vm as LocalRuntimeVm).local;
      const hostWorkspace = local.hostPath(workspace);
      await mkdir(hostWorkspace, { recursive: true });
      return SupervisorClient.start({
        vm: local,
        workspace: hostWorkspace,
        stateDir: local.hostPath(DEFAULT_AGENT_STATE_DIR),
        agentPath: local.hostPath(DEFAULT_AGENT_PATH),
        agentArgs: ["--shell", "/bin/sh", "--cgroup-root", "none"],
        logger,
        ...(door ? { door } : {}),
      });
    },
    // The guest identity files are the host's own here: never touched.
    async giveOwnIdentity(_supervisor, name) {
      runtime.identities.push(name);
    },
    openGateway: (guest, { portsFile, address, avoidPorts, logger, wake }) =>
      new PreviewGateway({
        connector: guestVmConnector(guest),
        leases: new JsonFilePortLeaseStore(portsFile),
        address,
        avoidPorts,
        logger,
        wake,
      }),
  };
  return runtime;
}

/**
 * Ends the local "VM" like a power-off: its commands, and every host process still working
 * inside its directory (services an agent started in their own sessions, left behind by an
 * agent that died).
 */
async function powerOff(local: LocalGuestVm): Promise<void> {
  await local.close();
  for (const entry of await listDir("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const cwd = await readlink(`/proc/${entry}/cwd`).catch(() => "");
    if (cwd === local.root || cwd.startsWith(`${local.root}/`)) {
      try {
        process.kill(Number(entry), "SIGKILL");
      } catch {
        // gone already
      }
    }
  }
}

/** Where a local disk keeps its checkpoints: copies of its files, each with its record. */
const LOCAL_CHECKPOINTS = "checkpoints";

/** The kept checkpoints of a local disk, oldest first. */
async function localCheckpoints(dir: string): Promise<KeptCheckpointInfo[]> {
  const root = join(dir, LOCAL_CHECKPOINTS);
  const ids = await readdir(root).catch(() => [] as string[]);
  const kept = await Promise.all(
    ids.map(async (id) => JSON.parse(await readFile(join(root, id, "checkpoint.json"), "utf8")) as KeptCheckpoint),
  );
  return kept.sort((a, b) => a.createdAt.localeCompare(b.createdAt)).map((k) => ({ ...k, bytes: 0 }));
}

/** Keeps a copy of a local disk's files (a "memory" one is only marked so: processes are not copied). */
async function keepLocal(dir: string, options: KeepOptions): Promise<KeptCheckpoint> {
  const id = options.id ?? randomBytes(6).toString("hex");
  const target = join(dir, LOCAL_CHECKPOINTS, id);
  await cp(join(dir, "root"), join(target, "root"), { recursive: true, filter: notSocket });
  const kept: KeptCheckpoint = {
    version: 1,
    id,
    ...(options.label !== undefined ? { label: options.label } : {}),
    pinned: options.pinned === true,
    createdAt: new Date().toISOString(),
    memory: options.memory === true,
    generation: 0,
    layers: [],
    ...(options.extra !== undefined ? { extra: options.extra } : {}),
  };
  await writeFile(join(target, "checkpoint.json"), JSON.stringify(kept));
  return kept;
}

/** The file a local "suspend" leaves in the disk directory. */
export const LOCAL_SUSPEND_MARKER = "suspended.local";
/** The file a local "VM" keeps in its disk directory while it runs: one left over means its owner died. */
export const LOCAL_RUN_MARKER = "running.local";

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** Names in a directory, or [] when it is missing. */
export async function listDir(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => []);
}

async function notSocket(path: string): Promise<boolean> {
  return !(await lstat(path)).isSocket();
}
