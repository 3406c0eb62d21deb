// The daemon's part of `diff` and `apply`: the guest makes the patch between a base snapshot and
// the workspace now (workspace-snapshots.ts), and the host reads it, bounded. For `--against`,
// the other instance's daemon hands over a git bundle of its workspace through a private host
// file (`workspace-export`), which this guest fetches into its store first.

import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import { isSupervisorError, type SupervisorClient } from "@pi-sandbox/supervisor";
import * as v from "valibot";
import { ControllerError, isControllerError } from "../errors.js";
import type { WorkspaceBase, WorkspaceExport, WorkspacePatchBytes } from "../actions/kit/context.js";
import { callDaemon } from "../state/daemon-call.js";
import { readRecord } from "../state/records.js";
import type { InstanceState } from "./state.js";
import {
  CREATED_REF,
  PEER_REF,
  checkpointRef,
  fetchStoreBundle,
  removeStoreFile,
  resolveStoreRef,
  storePath,
  writeStoreBundle,
  writeStorePatch,
} from "./workspace-snapshots.js";

/** Largest bundle of another instance's workspace brought over, in bytes (the agent's transfer limit). */
const BUNDLE_MAX_BYTES = 256 * 1024 * 1024;

/** The error of a base the store does not hold, saying what the base was and what to do. */
function baseMissing(name: string, base: WorkspaceBase): ControllerError {
  if (base.kind === "checkpoint") {
    const what = base.label !== undefined ? `${base.id} (${base.label})` : base.id;
    return new ControllerError(
      "CONTROLLER_DIFF_BASE_MISSING",
      `checkpoint ${what} of ${name} has no record of the workspace: it was taken while the instance was stopped, or its disk is not the one the instance runs on now (a rewind to an older state)`,
      {
        hint: `Compare with the instance's create instead ({"action":"diff","name":"${name}"}), or with a checkpoint taken while it ran.`,
        details: { name, checkpoint: base.id },
      },
    );
  }
  return new ControllerError(
    "CONTROLLER_DIFF_BASE_MISSING",
    `${name} has no record of its workspace as its create left it (created before pi-sandbox kept one, or the guest had no git then)`,
    {
      hint: `Take a checkpoint now ({"action":"checkpoint","name":"${name}"}) and diff since it later, or compare with another instance's workspace with against.`,
      details: { name },
    },
  );
}

function tooLarge(bytes: number, maxBytes: number): ControllerError {
  return new ControllerError(
    "CONTROLLER_PATCH_TOO_LARGE",
    `the workspace's patch is ${bytes} bytes, more than the ${maxBytes} this call takes`,
    {
      hint: "Narrow it to a path, look at the summary with stat, or copy the files themselves (pi-sandbox cp).",
      details: { bytes, maxBytes },
    },
  );
}

/** Reads a guest file of at most `maxBytes` into memory. */
async function readGuest(
  supervisor: SupervisorClient,
  path: string,
  maxBytes: number,
  signal: AbortSignal | undefined,
): Promise<Buffer> {
  const pieces: Buffer[] = [];
  try {
    await supervisor.files.readTo(path, { write: (piece) => void pieces.push(piece) }, { maxBytes, signal });
  } catch (error) {
    if (isSupervisorError(error, "FILE_TOO_LARGE")) {
      throw tooLarge(
        Number((error.details as { sizeBytes?: number } | undefined)?.sizeBytes ?? maxBytes + 1),
        maxBytes,
      );
    }
    throw error;
  }
  return Buffer.concat(pieces);
}

/** The store ref (or commit) `base` names in this guest, fetching another instance's workspace first. */
async function baseRef(
  state: InstanceState,
  supervisor: SupervisorClient,
  base: WorkspaceBase,
  signal: AbortSignal | undefined,
): Promise<string> {
  if (base.kind === "created") return CREATED_REF;
  if (base.kind === "checkpoint") return checkpointRef(base.id);
  return fetchPeer(state, supervisor, base.name, signal);
}

const exported = v.object({
  name: v.string(),
  commit: v.pipe(v.string(), v.regex(/^[0-9a-f]{40}$/)),
  bundled: v.boolean(),
  bytes: v.pipe(v.number(), v.integer(), v.minValue(0)),
});

/**
 * Brings instance `other`'s workspace now into this guest's store and returns what names it here.
 * Its daemon snapshots it and writes a bundle (without what this store's create snapshot already
 * holds: forks share it) into a private host directory; the bundle is sent into this guest and
 * fetched as {@link PEER_REF}.
 */
async function fetchPeer(
  state: InstanceState,
  supervisor: SupervisorClient,
  other: string,
  signal: AbortSignal | undefined,
): Promise<string> {
  if (other === state.name) {
    throw new ControllerError("CONTROLLER_BAD_INPUT", `${other} cannot be compared with itself`, {
      hint: "Name another instance (a fork) to compare with, or leave against out to compare with the create.",
    });
  }
  if (!(await readRecord(state.layout, "instances", other))) {
    throw new ControllerError("CONTROLLER_NOT_FOUND", `no instance named ${other}`, {
      hint: 'List instances with {"action":"list"}.',
      details: { name: other },
    });
  }
  const known = await resolveStoreRef(supervisor, CREATED_REF, { signal });
  const dir = await mkdtemp(join(tmpdir(), "pisb-peer-"));
  try {
    const file = join(dir, "workspace.bundle");
    const answer = v.safeParse(
      exported,
      await callDaemon(
        state.layout.socketPath("instances", other),
        { action: "workspace-export", name: other, to: file, ...(known ? { known } : {}) },
        { signal },
      ),
    );
    if (!answer.success)
      throw new ControllerError("CONTROLLER_INTERNAL", `${other}'s daemon answered the export oddly`);
    if (!answer.output.bundled) return answer.output.commit;
    const guestBundle = posix.join(storePath(supervisor), "peer.bundle");
    await uploadFile(supervisor, file, guestBundle, signal);
    const fetched = await fetchStoreBundle(supervisor, guestBundle, PEER_REF, { signal });
    if (fetched !== answer.output.commit) {
      throw new ControllerError("CONTROLLER_WORKSPACE_SNAPSHOT_FAILED", `${other}'s workspace did not arrive whole`, {
        hint: "Try again.",
        details: { expected: answer.output.commit, fetched },
      });
    }
    return PEER_REF;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function sha256OfFile(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** Sends host file `from` to guest path `to` (sha256-checked by the agent). */
async function uploadFile(
  supervisor: SupervisorClient,
  from: string,
  to: string,
  signal: AbortSignal | undefined,
): Promise<void> {
  const handle = await open(from, "r");
  try {
    const { size } = await handle.stat();
    await supervisor.files.writeFrom(
      to,
      {
        size,
        sha256: await sha256OfFile(from),
        read: async (offset, length) => {
          const buffer = Buffer.alloc(length);
          const { bytesRead } = await handle.read(buffer, 0, length, offset);
          return buffer.subarray(0, bytesRead);
        },
      },
      { mode: 0o600, signal },
    );
  } finally {
    await handle.close();
  }
}

/**
 * The patch of the workspace now against `base`, made in the guest, at most `maxBytes` (else
 * CONTROLLER_PATCH_TOO_LARGE). CONTROLLER_DIFF_BASE_MISSING when the store holds no such base.
 */
export async function workspacePatch(
  state: InstanceState,
  options: { base: WorkspaceBase; path?: string; maxBytes: number; signal?: AbortSignal },
): Promise<WorkspacePatchBytes> {
  const { signal } = options;
  const supervisor = state.running().supervisor;
  const base = await baseRef(state, supervisor, options.base, signal);
  let made;
  try {
    made = await writeStorePatch(supervisor, base, { signal, ...(options.path ? { path: options.path } : {}) });
  } catch (error) {
    if (isControllerError(error, "CONTROLLER_DIFF_BASE_MISSING")) throw baseMissing(state.name, options.base);
    throw error;
  }
  if (made.bytes > options.maxBytes) throw tooLarge(made.bytes, options.maxBytes);
  const patch = await readGuest(supervisor, made.path, options.maxBytes, signal);
  return {
    patch,
    commit: made.commit,
    baseCommit: made.base,
    ...(made.leftOut ? { leftOut: made.leftOut } : {}),
  };
}

/**
 * Snapshots the workspace and writes a git bundle of it to new host file `to` (never an existing
 * one: opened exclusively, 0600), without the objects of `known` when this store holds that
 * commit. No file when the workspace is `known` itself.
 */
export async function exportWorkspace(
  state: InstanceState,
  to: string,
  options: { known?: string; signal?: AbortSignal },
): Promise<WorkspaceExport> {
  const { signal } = options;
  const supervisor = state.running().supervisor;
  const made = await writeStoreBundle(supervisor, options.known, { signal });
  if (made.path === undefined) return { name: state.name, commit: made.commit, bundled: false, bytes: 0 };
  try {
    const handle = await open(to, "wx", 0o600);
    let bytes = 0;
    let kept = false;
    try {
      const read = await supervisor.files.readTo(
        made.path,
        {
          write: async (piece) => {
            await handle.write(piece);
          },
        },
        { maxBytes: BUNDLE_MAX_BYTES, signal },
      );
      bytes = read.size;
      await handle.close();
      kept = true;
    } finally {
      if (!kept) {
        await handle.close().catch(() => undefined);
        await rm(to, { force: true });
      }
    }
    return { name: state.name, commit: made.commit, bundled: true, bytes };
  } finally {
    await removeStoreFile(supervisor, made.path).catch(() => undefined);
  }
}
