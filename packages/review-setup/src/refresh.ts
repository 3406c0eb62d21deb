// One refresh: instance -> snapshot -> transfer -> verify -> unpack -> install -> build -> switch
// -> agent dir -> (live: credentials -> live check). Guest work goes through GuestSession only; the
// candidate's steps (transfer to switch) are in candidate.ts.
import { resolve } from "node:path";
import { callAction, type CallActionOptions } from "@pi-sandbox/controller/client";
import { ensureLiveSecrets } from "./add-secrets.js";
import type { ReviewSetupArgs } from "./args.js";
import { resolveHostCredential, type HostCredential } from "./credentials.js";
import { ReviewSetupError } from "./errors.js";
import { controllerGuest, type ControllerOptions, type GuestSession } from "./guest.js";
import { declareLiveSecrets, hostLoginProviders, requireSecret } from "./host-secrets.js";
import { checkGuestTools, ensureInstance, GUEST_PROBE } from "./instance.js";
import { launchCommand } from "./launch.js";
import type { HostLoginRefresher } from "./pi-login.js";
import { acquireRefreshLock, defaultLockDir, refreshLockPath } from "./lock.js";
import { reviewLayout, type ReviewLayout } from "./layout.js";
import { credentialStartMessage, keepCredentialOnHost, runLiveCheck, shapeFor, type LiveCheck } from "./live.js";
import { installLocalModels, LOCAL_PROVIDER } from "./local-models.js";
import { modelServerSecret, readServedModels, requireModelServerSecret, type ServedModels } from "./model-server.js";
import { liveSecret, type LiveSecret } from "./providers.js";
import { scopeCommands, type InstallScope } from "./scope.js";
import { createSnapshot, type Vcs } from "./snapshot.js";
import { prepareAgentDir } from "./agent-dir.js";
import { candidateIdAt, installCandidate } from "./candidate.js";
import type { StepEvent, StepName } from "./steps.js";

export type { StepEvent, StepName } from "./steps.js";

/** Options of `runReviewSetup`: the parsed arguments plus seams. */
export interface ReviewSetupOptions extends Omit<ReviewSetupArgs, "piCommand"> {
  /** Program part of the launch command; default Pi with the sandbox extension. */
  piCommand?: string;
  /** How to reach the controller (env selects the state root; cwd resolves `config`). */
  controller?: ControllerOptions;
  /** Guest access; default the controller client for `name`. */
  guest?: GuestSession;
  /**
   * Controller call for the instance's own actions (inspect, create, secrets-add, secrets, suspend,
   * start); default `callAction` (a seam for tests). Guest work goes through `guest`.
   */
  callAction?: (input: unknown, options?: CallActionOptions) => Promise<unknown>;
  /** What the install and build steps cover (see scope.ts); default `full`. */
  scope?: InstallScope;
  /** Frozen-lockfile install command, run in the candidate; overrides the scope's. */
  installCommand?: string;
  /** Build command, run in the candidate; overrides the scope's. */
  buildCommand?: string;
  /** Host environment: the Pi login (`PI_CODING_AGENT_DIR`, `HOME`) and PATH for git/jj/tar; default `process.env`. */
  hostEnv?: NodeJS.ProcessEnv;
  /** Refreshes an expiring host OAuth login (live mode); default through Pi's SDK. */
  refreshLogin?: HostLoginRefresher;
  /** Progress callback. */
  onProgress?: (event: StepEvent) => void;
  /** Asks the user a yes/no question (a terminal); absent: nobody to ask, so no restart without `restart`. */
  confirm?: (question: string) => Promise<boolean>;
  /** Ends the refresh with `signal.reason`; a guest command in flight is left to finish. */
  signal?: AbortSignal;
  /**
   * Host directory of the per-instance refresh locks; default `<state root>/review-setup`, the
   * state root of `controller.env`.
   */
  lockDir?: string;
  /** Clock, for candidate ids and token checks. */
  now?: () => number;
}

/** What a successful refresh did. */
export interface ReviewSetupResult {
  /** Instance name. */
  instance: string;
  /** `live-ready` only after a generated response in live mode; `local-model-server` with `--model-server`. */
  mode: "offline-snapshot" | "live-ready" | "local-model-server";
  /** Version control the snapshot came from. */
  vcs: Vcs;
  /** What install and build covered. */
  scope: InstallScope;
  /** Number of files in the snapshot. */
  files: number;
  /** Archive size in bytes. */
  bytes: number;
  /** sha256 of the archive, verified in the guest. */
  sha256: string;
  /** New candidate id. */
  candidateId: string;
  /** Guest path of the new candidate. */
  candidatePath: string;
  /** Guest path of the `current` symlink (now pointing at the candidate). */
  currentPath: string;
  /** Candidate id that was current before, if any. */
  previousId: string | undefined;
  /** Guest path of the isolated agent directory. */
  agentDir: string;
  /** Guest shell command that launches Pi from the current candidate. */
  launchCommand: string;
  /** Optional extras and what happened to them (e.g. Herdr). */
  notes: string[];
  /** Live-mode facts (token expiry, usage); absent offline. */
  live: LiveCheck | undefined;
  /** `--model-server`: the guest's base URL, the served models and the one launched; else absent. */
  modelServer?: ServedModels & { guestUrl: string; hostUrl: string };
}

/** Refreshes the review candidate of a checkout inside an instance; see the package README. */
export async function runReviewSetup(options: ReviewSetupOptions): Promise<ReviewSetupResult> {
  const { name, signal } = options;
  const now = options.now ?? Date.now;
  const emit = (step: StepName, status: StepEvent["status"], message: string) =>
    options.onProgress?.({ step, status, message });
  const controller = options.controller ?? {};
  const guest = options.guest ?? controllerGuest(name, controller);

  // Host login problems should surface before minutes of guest work.
  const liveProvider = options.liveModel?.provider;
  if (liveProvider) liveSecret(liveProvider);
  const credential = liveProvider
    ? await resolveHostCredential(liveProvider, {
        env: options.hostEnv,
        now: now(),
        refreshLogin: options.refreshLogin,
        signal,
        accept: (kind) => void liveSecret(liveProvider, kind),
      })
    : undefined;
  const secret = credential ? liveSecret(credential.provider, credential.kind) : undefined;
  // A token no placeholder can be shaped from fails here, before minutes of guest work.
  if (secret?.shape && credential) shapeFor(secret, credential);
  const stateDir = options.lockDir ?? defaultLockDir(controller.env ?? process.env);

  const server = options.modelServer;
  let served: ServedModels | undefined;
  if (server) {
    emit("model-server", "start", `reading the model list of ${server.hostUrl}/models`);
    served = await readServedModels(server, { signal, ...(options.hostEnv ? { env: options.hostEnv } : {}) });
    emit(
      "model-server",
      "done",
      `${served.ids.length} model(s): ${served.ids.slice(0, 5).join(", ")}${served.ids.length > 5 ? ", …" : ""}`,
    );
  }

  emit("instance", "start", options.config ? `creating ${name} from ${options.config}` : `checking ${name}`);
  let view = await ensureInstance(
    {
      name,
      config: options.config,
      hostPort: server?.port,
      secrets: async () => ({
        ...(await declareLiveSecrets(stateDir, name, [
          ...(await hostLoginProviders(options.hostEnv ?? process.env)),
          ...(liveProvider ? [liveProvider] : []),
        ])),
        ...(server ? modelServerSecret(server) : {}),
      }),
      configDir: stateDir,
      callAction: options.callAction,
      signal,
    },
    controller,
    (message) => emit("instance", "info", message),
  );
  const lockFile = refreshLockPath(stateDir, name);
  const release = await acquireRefreshLock(lockFile, {
    instance: name,
    repo: resolve(options.repo ?? controller.cwd ?? process.cwd()),
    now: now(),
  });
  // Under the lock from here: a restart below must not cut another refresh's guest work short.
  try {
    let restartNote: string | undefined;
    if (secret && !options.config) {
      const ensured = await ensureLiveSecrets({
        name,
        view,
        provider: options.liveModel!.provider,
        secret,
        stateDir,
        restart: options.restart ?? false,
        ...(options.confirm ? { confirm: options.confirm } : {}),
        call: options.callAction ?? callAction,
        controller,
        info: (message) => emit("instance", "info", message),
        signal,
      });
      view = ensured.view;
      restartNote = ensured.note;
    }
    if (secret) requireSecret(name, view, secret, options.liveModel!.provider);
    if (server) requireModelServerSecret(name, view, server);
    const probe = await guest.exec(GUEST_PROBE, { signal });
    const workspace = probe.output.split("\n")[0]?.trim() ?? "";
    if (probe.exitCode !== 0 || !workspace.startsWith("/")) {
      throw new ReviewSetupError("REVIEW_SETUP_STEP_FAILED", `could not probe the guest of ${name}: ${probe.output}`, {
        hint: `Check the instance with: npx pi-sandbox inspect ${name}`,
        details: { step: "instance" },
      });
    }
    checkGuestTools(name, probe.output);
    const layout = reviewLayout(workspace);
    emit("instance", "done", `${name} is running; workspace ${workspace}`);

    const result = await refreshLocked(options, { guest, layout, credential, secret, stateDir, served, emit, now });
    if (restartNote) result.notes.unshift(restartNote);
    return result;
  } finally {
    await release();
  }
}

interface RefreshContext {
  guest: GuestSession;
  layout: ReviewLayout;
  credential: HostCredential | undefined;
  /** The secret that carries `credential`. */
  secret: LiveSecret | undefined;
  /** review-setup's host directory (locks, derived configs, secret files). */
  stateDir: string;
  served: ServedModels | undefined;
  emit: (step: StepName, status: StepEvent["status"], message: string) => void;
  now: () => number;
}

/** The refresh proper, run while holding the instance's refresh lock. */
async function refreshLocked(options: ReviewSetupOptions, context: RefreshContext): Promise<ReviewSetupResult> {
  const { name, signal } = options;
  const { guest, layout, credential, secret, served, emit, now } = context;
  const controller = options.controller ?? {};

  emit("snapshot", "start", `snapshotting ${resolve(options.repo ?? controller.cwd ?? process.cwd())}`);
  const snapshot = await createSnapshot(options.repo ?? controller.cwd ?? process.cwd(), { env: options.hostEnv });
  try {
    emit(
      "snapshot",
      "done",
      `${snapshot.files.length} tracked files from ${snapshot.vcs} (${snapshot.bytes} bytes, sha256 ${snapshot.sha256})`,
    );
    const scope = options.scope ?? "full";
    const commands = await scopeCommands(scope, snapshot.root, snapshot.files);
    if (commands.workspaces) {
      emit("snapshot", "info", `scope pi: installing for the Pi extension, building ${commands.workspaces.join(", ")}`);
    }
    const { id, candidate, previousId } = await installCandidate(
      { guest, layout, name, emit, signal },
      snapshot,
      { install: options.installCommand ?? commands.install, build: options.buildCommand ?? commands.build },
      candidateIdAt(now(), snapshot.sha256),
    );

    const notes: string[] = [];
    emit("agent", "start", `preparing the isolated agent directory ${layout.agentDir}`);
    const agent = await prepareAgentDir(guest, layout, layout.log(id, "agent"), signal);
    notes.push(agent.note);
    emit("agent", "done", notes[notes.length - 1] ?? "");

    const piCommand = options.piCommand ?? "node_modules/.bin/pi -e ./packages/pi-extension";
    const server = options.modelServer;
    if (server && served) {
      emit("local-models", "start", `pointing the guest's Pi at ${server.guestUrl} (provider ${LOCAL_PROVIDER})`);
      await installLocalModels(guest, layout, server, served, { name, signal });
      emit(
        "local-models",
        "done",
        `models.json seeded with ${served.ids.length} model(s); the guest reached the server`,
      );
    }
    const model = options.liveModel
      ? `${options.liveModel.provider}/${options.liveModel.model}`
      : served
        ? `${LOCAL_PROVIDER}/${served.model}`
        : undefined;
    let live: LiveCheck | undefined;
    if (credential && secret && model) {
      emit("credentials", "start", credentialStartMessage(credential, secret));
      const stored = await keepCredentialOnHost(guest, layout, {
        credential,
        secret,
        dir: context.stateDir,
        instance: name,
        controller,
        callAction: options.callAction,
        signal,
      });
      emit("credentials", "done", stored);
      emit("live-check", "start", `asking ${model} for one generated response`);
      live = await runLiveCheck(guest, layout, {
        piCommand,
        model,
        expiresAt: credential.expiresAt,
        log: layout.log(id, "live-check"),
        signal,
      });
      emit("live-check", "done", `response received; ${live.usage.totalTokens} tokens`);
    } else {
      emit(
        "credentials",
        "skip",
        `no --live-model: ${served ? "the host's model server needs none" : "offline snapshot"}, no credentials copied`,
      );
    }

    return {
      instance: name,
      mode: live ? "live-ready" : served ? "local-model-server" : "offline-snapshot",
      vcs: snapshot.vcs,
      files: snapshot.files.length,
      scope,
      bytes: snapshot.bytes,
      sha256: snapshot.sha256,
      candidateId: id,
      candidatePath: candidate,
      currentPath: layout.current,
      previousId,
      agentDir: layout.agentDir,
      launchCommand: launchCommand(layout, { piCommand, model }),
      notes,
      live,
      modelServer: server && served ? { ...served, guestUrl: server.guestUrl, hostUrl: server.hostUrl } : undefined,
    };
  } finally {
    await snapshot.close();
  }
}
