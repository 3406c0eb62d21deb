// The workspace store: snapshots of a guest's workspace kept as commits in a bare git repository
// inside the guest (`/var/lib/pi-sandbox/workspace.git`), so they travel with its disk into forks,
// checkpoints and rewinds. The create's snapshot is `refs/pi-sandbox/created`, a kept checkpoint's
// `refs/pi-sandbox/checkpoints/<id>`; `diff` compares the workspace now with one of them.
// The work runs in the guest (workspace-store-program.ts); everything it answers is checked here.
// A checkpoint's snapshot leaves out files over CHECKPOINT_FILE_MAX_BYTES and names them (hashing a
// large changing file, a log or a database, would make every checkpoint as slow as its size), so
// `diff --since` that checkpoint leaves them out and names them too. The create's snapshot and
// diff's own snapshot of the workspace now record every file.

import { posix } from "node:path";
import { escapeControlChars, shellQuote } from "@pi-sandbox/config";
import type { SupervisorClient } from "@pi-sandbox/supervisor";
import * as v from "valibot";
import { ControllerError } from "../errors.js";
import type { WorkspaceLeftOut } from "../state/checkpoints.js";
import type { ProgressEvent } from "../wire.js";
import { STORE_ANSWER_MARK, WORKSPACE_STORE_PROGRAM } from "./workspace-store-program.js";

/** The ref of the workspace as the instance's create left it (after setup). */
export const CREATED_REF = "refs/pi-sandbox/created";
/** The ref another instance's workspace is fetched into for `diff --against`. */
export const PEER_REF = "refs/pi-sandbox/peer";

/** The ref of the snapshot taken with kept checkpoint `id` (12 hex digits). */
export function checkpointRef(id: string): string {
  if (!/^[0-9a-f]{12}$/.test(id)) throw new ControllerError("CONTROLLER_BAD_INPUT", `${id} is not a checkpoint id`);
  return `refs/pi-sandbox/checkpoints/${id}`;
}

/** A store ref the program takes (it checks the same rule). */
const REF_PATTERN = /^refs\/pi-sandbox\/[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/;
/** A full commit id. */
const COMMIT_PATTERN = /^[0-9a-f]{40}$/;

/**
 * Largest workspace file a checkpoint's snapshot records, in bytes: a larger one is left out and
 * named (what a checkpoint costs does not grow with such files). The guest's hashing under TCG
 * runs at a few MiB/s.
 */
export const CHECKPOINT_FILE_MAX_BYTES = 2 * 1024 * 1024;
/** Most left-out files an answer names (the guest's commit names them all). */
const LEFT_OUT_SHOWN = 100;

/** How long one store operation may run in the guest before it is ended, in ms (a large first snapshot under TCG). */
const STORE_DEADLINE_MS = 15 * 60 * 1000;
/** Each exec wait, in ms (the agent's limit). */
const WAIT_MS = 60_000;

/**
 * The guest path of the store: `/var/lib/pi-sandbox/workspace.git`, beside the agent's state
 * directory (`/var/lib/pi-sandbox-agent`), which the agent reports; in the local runtime both
 * lie under its "guest" directory on the host.
 */
export function storePath(supervisor: SupervisorClient): string {
  const stateDir = supervisor.hello.stateDir;
  if (!posix.isAbsolute(stateDir)) {
    throw new ControllerError("CONTROLLER_INTERNAL", `the guest agent reports a relative state directory`, {
      details: { stateDir: escapeControlChars(stateDir) },
    });
  }
  return posix.join(posix.dirname(posix.normalize(stateDir)), "pi-sandbox", "workspace.git");
}

const commitId = v.pipe(v.string(), v.regex(COMMIT_PATTERN));
const leftOut = {
  leftOut: v.pipe(v.array(v.pipe(v.string(), v.maxLength(4096))), v.maxLength(LEFT_OUT_SHOWN)),
  leftOutCount: v.pipe(v.number(), v.integer(), v.minValue(0)),
};
const answers = {
  snapshot: v.object({ ok: v.literal(true), commit: commitId, ...leftOut }),
  resolve: v.object({ ok: v.literal(true), commit: v.nullable(commitId) }),
  diff: v.object({
    ok: v.literal(true),
    ...leftOut,
    commit: commitId,
    base: commitId,
    patch: v.string(),
    bytes: v.pipe(v.number(), v.integer(), v.minValue(0)),
    binary: v.pipe(v.number(), v.integer(), v.minValue(0)),
  }),
  bundle: v.object({
    ok: v.literal(true),
    commit: commitId,
    bundle: v.nullable(v.string()),
    bytes: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0))),
  }),
  fetch: v.object({ ok: v.literal(true), commit: v.nullable(commitId) }),
} as const;
type StoreOp = keyof typeof answers;
const failure = v.object({ ok: v.literal(false), error: v.string(), detail: v.optional(v.string()) });

/** Options of a store operation. */
export interface StoreOptions {
  /** Ends the wait and the guest's work. */
  signal?: AbortSignal;
}

function snapshotFailed(message: string, details: Record<string, unknown> = {}): ControllerError {
  return new ControllerError("CONTROLLER_WORKSPACE_SNAPSHOT_FAILED", message, {
    hint: "Check the guest's disk space and the workspace (exec df -h, ls -la), then try again.",
    details,
  });
}

/** The program's failure as the controller's error. */
function storeError(code: string, detail: string): ControllerError {
  const shown = escapeControlChars(detail.slice(-1000));
  switch (code) {
    case "no-git":
      return new ControllerError(
        "CONTROLLER_GUEST_GIT_MISSING",
        "the guest has no git, which diff and apply need to record the workspace",
        {
          hint: "Use an image with git (pi-sandbox's default image has it), or install it in the config's setup (apt-get install -y git) and create the instance again.",
        },
      );
    case "no-workspace":
      return snapshotFailed(`the guest workspace ${shown} is not a directory`);
    case "no-base":
      // The caller knows what the base was and says so (workspace-diff.ts).
      return new ControllerError("CONTROLLER_DIFF_BASE_MISSING", `the workspace store has no ${shown}`, {
        details: { ref: detail },
      });
    default:
      return snapshotFailed(`recording the guest workspace failed: ${shown}`, { error: code });
  }
}

/**
 * Runs one store operation in the guest and returns its checked answer. The program may take
 * minutes (a first snapshot of a large workspace): the exec is followed until it ends, and ended
 * after {@link STORE_DEADLINE_MS} or when `signal` aborts.
 */
export async function runStore<Op extends StoreOp>(
  supervisor: SupervisorClient,
  op: Op,
  args: Record<string, unknown>,
  options: StoreOptions = {},
): Promise<v.InferOutput<(typeof answers)[Op]>> {
  const { signal } = options;
  const command = `python3 -c ${shellQuote(WORKSPACE_STORE_PROGRAM)} ${op} ${shellQuote(
    JSON.stringify({ store: storePath(supervisor), fileMax: CHECKPOINT_FILE_MAX_BYTES, ...args }),
  )}`;
  const deadline = Date.now() + STORE_DEADLINE_MS;
  let run = await supervisor.exec(command, { cwd: "/", timeoutMs: WAIT_MS, separateStderr: true, signal });
  let stdout = run.output;
  let stderr = run.stderr ?? "";
  try {
    while (run.running) {
      if (Date.now() > deadline) {
        throw snapshotFailed(
          `recording the guest workspace took more than ${STORE_DEADLINE_MS / 60_000} minutes and was ended`,
          { op },
        );
      }
      run = await supervisor.execStatus(run.handle, { timeoutMs: WAIT_MS, signal });
      stdout += run.output;
      stderr = (stderr + (run.stderr ?? "")).slice(-4000);
    }
  } catch (error) {
    // The program holds the store's lock while it runs: a left-over run would hold the next one up.
    if (run.running) await supervisor.execKill(run.handle).catch(() => undefined);
    throw error;
  }
  const line = stdout
    .split("\n")
    .reverse()
    .find((l) => l.startsWith(STORE_ANSWER_MARK));
  let answer: unknown;
  try {
    answer = line === undefined ? undefined : JSON.parse(line.slice(STORE_ANSWER_MARK.length));
  } catch {
    answer = undefined;
  }
  const failed = v.safeParse(failure, answer);
  if (failed.success) throw storeError(failed.output.error, failed.output.detail ?? "");
  const parsed = v.safeParse(answers[op], answer);
  if (!parsed.success) {
    const missing = /python3: (command )?not found|No such file or directory.*python3/.test(stderr);
    throw snapshotFailed(
      missing
        ? "the guest has no python3, which records the workspace"
        : `recording the guest workspace failed (exit ${run.exitCode ?? "?"}): ${escapeControlChars(stderr.trim().slice(-800)) || "no answer"}`,
      { op, exitCode: run.exitCode },
    );
  }
  return parsed.output as v.InferOutput<(typeof answers)[Op]>;
}

/** The files an answer says the snapshot left out (larger than {@link CHECKPOINT_FILE_MAX_BYTES}). */
function leftOutOf(answer: { leftOut: string[]; leftOutCount: number }): WorkspaceLeftOut | undefined {
  if (answer.leftOutCount === 0) return undefined;
  return {
    files: answer.leftOut,
    count: Math.max(answer.leftOutCount, answer.leftOut.length),
    overBytes: CHECKPOINT_FILE_MAX_BYTES,
  };
}

/**
 * Records the guest workspace `workspace` (absolute guest path) as a commit in the store and
 * returns its id (40 hex digits, checked). With `ref` (`refs/pi-sandbox/…`, e.g.
 * {@link checkpointRef}), the commit is kept under that name. The workspace's own `.git` and its
 * `.gitignore` rules count (ignored files are left out), and so does `node_modules/`; nested
 * repositories are left out. Files over {@link CHECKPOINT_FILE_MAX_BYTES} are left out (and
 * returned) unless `full`. The same workspace content gives the same id. Throws
 * CONTROLLER_GUEST_GIT_MISSING when the guest has no git.
 */
export async function snapshotWorkspace(
  supervisor: SupervisorClient,
  workspace: string,
  options: StoreOptions & { ref?: string; full?: boolean } = {},
): Promise<{ commit: string; leftOut?: WorkspaceLeftOut }> {
  if (options.ref !== undefined && !REF_PATTERN.test(options.ref)) {
    throw new ControllerError("CONTROLLER_INTERNAL", `${options.ref} is not a workspace store ref`);
  }
  const answer = await runStore(
    supervisor,
    "snapshot",
    {
      workspace,
      ...(options.ref !== undefined ? { ref: options.ref } : {}),
      ...(options.full ? { full: true } : {}),
    },
    options,
  );
  const left = leftOutOf(answer);
  return { commit: answer.commit, ...(left ? { leftOut: left } : {}) };
}

/** The commit a store ref (or commit id) names, or undefined when the store has none. */
export async function resolveStoreRef(
  supervisor: SupervisorClient,
  ref: string,
  options: StoreOptions = {},
): Promise<string | undefined> {
  if (!REF_PATTERN.test(ref) && !COMMIT_PATTERN.test(ref)) {
    throw new ControllerError("CONTROLLER_INTERNAL", `${ref} is not a workspace store ref`);
  }
  return (await runStore(supervisor, "resolve", { ref }, options)).commit ?? undefined;
}

/**
 * The snapshot the create's first boot takes once setup ran: what `diff` compares with by default.
 * A guest without git (or any other failure) leaves the instance without one, and says so.
 */
export async function takeCreatedSnapshot(
  supervisor: SupervisorClient,
  progress: (event: ProgressEvent) => void,
): Promise<void> {
  try {
    await snapshotWorkspace(supervisor, supervisor.workspace, { ref: CREATED_REF, full: true });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    progress({ stage: "setup", message: `the workspace was not recorded for diff: ${message}` });
  }
}

/** A patch the guest wrote into its store. */
export interface StorePatch {
  /** The snapshot of the workspace now. */
  commit: string;
  /** The commit it is compared with. */
  base: string;
  /** Guest path of the patch file. */
  path: string;
  /** Its size in bytes, as the guest reports it. */
  bytes: number;
  /** Files the base left out (a checkpoint's large files): the patch leaves them out too. */
  leftOut?: WorkspaceLeftOut;
}

/**
 * Snapshots the workspace and writes the patch from `base` (a store ref or commit id) to it into
 * the store (`git diff --binary -M --full-index`, restricted to `path`, relative to the workspace,
 * when given). What `base` left out is left out of the patch and named. CONTROLLER_DIFF_BASE_MISSING
 * when the store has no `base`.
 */
export async function writeStorePatch(
  supervisor: SupervisorClient,
  base: string,
  options: StoreOptions & { path?: string } = {},
): Promise<StorePatch> {
  if (!REF_PATTERN.test(base) && !COMMIT_PATTERN.test(base)) {
    throw new ControllerError("CONTROLLER_INTERNAL", `${base} is not a workspace store ref`);
  }
  const store = storePath(supervisor);
  const answer = await runStore(
    supervisor,
    "diff",
    { workspace: supervisor.workspace, base, ...(options.path ? { path: options.path } : {}) },
    options,
  );
  if (posix.dirname(answer.patch) !== store) {
    throw snapshotFailed("the guest named a patch outside its workspace store", { op: "diff" });
  }
  const left = leftOutOf(answer);
  return {
    commit: answer.commit,
    base: answer.base,
    path: answer.patch,
    bytes: answer.bytes,
    ...(left ? { leftOut: left } : {}),
  };
}

/**
 * Snapshots the workspace as `refs/pi-sandbox/export` and writes a bundle of it into the store,
 * without the objects `known` (a commit the receiving store has) already holds. No bundle when the
 * snapshot is `known` itself.
 */
export async function writeStoreBundle(
  supervisor: SupervisorClient,
  known: string | undefined,
  options: StoreOptions = {},
): Promise<{ commit: string; path?: string }> {
  if (known !== undefined && !COMMIT_PATTERN.test(known)) {
    throw new ControllerError("CONTROLLER_BAD_INPUT", `${known} is not a commit id`);
  }
  const answer = await runStore(
    supervisor,
    "bundle",
    { workspace: supervisor.workspace, ...(known ? { known } : {}) },
    options,
  );
  if (answer.bundle !== null && posix.dirname(answer.bundle) !== storePath(supervisor)) {
    throw snapshotFailed("the guest named a bundle outside its workspace store", { op: "bundle" });
  }
  return { commit: answer.commit, ...(answer.bundle !== null ? { path: answer.bundle } : {}) };
}

/** Fetches the bundle at guest path `bundle` (in the store; removed after) into store ref `ref`. */
export async function fetchStoreBundle(
  supervisor: SupervisorClient,
  bundle: string,
  ref: string,
  options: StoreOptions = {},
): Promise<string | undefined> {
  return (await runStore(supervisor, "fetch", { bundle, ref }, options)).commit ?? undefined;
}

/** Removes a file the store program wrote into the store (a bundle the host has read). */
export async function removeStoreFile(supervisor: SupervisorClient, path: string): Promise<void> {
  if (posix.dirname(path) !== storePath(supervisor)) return;
  await supervisor.exec(`rm -f -- ${shellQuote(path)}`, { cwd: "/", timeoutMs: WAIT_MS });
}
