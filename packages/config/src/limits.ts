/**
 * Every numeric limit, in one frozen table that the other packages import instead of
 * repeating the numbers.
 */
export const LIMITS = Object.freeze({
  /** Largest accepted sandbox.yaml, in bytes (1 MiB). */
  yamlMaxBytes: 1024 * 1024,
  /** Most YAML alias expansions accepted in one file. */
  yamlMaxAliasCount: 100,
  /** Default wait of exec and exec-status, in ms. */
  execWaitDefaultMs: 10_000,
  /** Longest wait of exec and exec-status, in ms (the shortest is 0). */
  execWaitMaxMs: 60_000,
  /** Most output returned per call and per file read, in bytes (64 KiB); more is cut and marked. */
  outputMaxBytes: 64 * 1024,
  /** Largest file write, in bytes (1 MiB). */
  writeMaxBytes: 1024 * 1024,
  /** Most completed exec handles kept per controller. */
  completedExecHandles: 128,
  /** One deadline for all setup work, in ms (20 min). */
  setupDeadlineMs: 20 * 60 * 1000,
  /** How long start waits for resume hooks before continuing them in the background, in ms. */
  resumeWaitMs: 10_000,
  /** Default readiness deadline of a declared service (`timeoutMs`), in ms. */
  readinessDefaultMs: 30_000,
  /** Readiness deadline of an ad-hoc service-start, in ms. */
  adhocReadinessMs: 60_000,
  /** Delay before a service that exited is started again, in ms. */
  serviceRestartDelayMs: 1_000,
  /** Default number of log lines returned. */
  logLinesDefault: 100,
  /** Most log lines returned. */
  logLinesMax: 500,
  /** Most services one sandbox.yaml may declare (each may open a host listener). */
  servicesMax: 64,
  /** Most localhost previews (host listeners) one instance holds, declared and ad-hoc together. */
  previewsMax: 64,
  /** Most host ports one sandbox.yaml may open to the guest (`network.hostPorts`). */
  hostPortsMax: 16,
  /** Most credentials one sandbox.yaml may name (`network.secrets`). */
  secretsMax: 32,
  /** Largest secret value the host reads from its source, in bytes (64 KiB). */
  secretValueMaxBytes: 64 * 1024,
  /** Most read-only host directories one sandbox.yaml may mount (`mounts`). */
  mountsMax: 16,
  /** Shortest `idle.suspendAfter`, in ms (10 s): shorter would suspend between a user's clicks. */
  idleSuspendMinMs: 10_000,
  /** Longest `idle.suspendAfter`, in ms (7 days). */
  idleSuspendMaxMs: 7 * 24 * 60 * 60 * 1000,
  /**
   * Guest CPU use below which an instance counts as idle, in percent of one host core, averaged
   * over `idleCpuWindowMs`: above an idle guest's timer ticks under software
   * emulation, well below one busy vCPU.
   */
  idleCpuPercent: 25,
  /** The window the guest's CPU use is averaged over for idleness, in ms. */
  idleCpuWindowMs: 5_000,
  /**
   * Shortest `checkpoint.every`, in ms (30 s): each checkpoint adds a disk layer until the stop
   * merges them, and a run keeps at most 64.
   */
  checkpointEveryMinMs: 30_000,
  /** Longest `checkpoint.every`, in ms (24 h). */
  checkpointEveryMaxMs: 24 * 60 * 60 * 1000,
  /** Most kept checkpoints `checkpoint.keep` may allow (each pins a few disk layers). */
  checkpointKeepMax: 500,
  /** Largest `checkpoint.keepGiB`. */
  checkpointKeepGiBMax: 4096,
  /** Most days `ledger.keepDestroyed` may keep a destroyed instance's ledger (100 years; `forever` has no end). */
  ledgerKeepDaysMax: 36_500,
} as const);

/** The shape of {@link LIMITS}. */
export type Limits = typeof LIMITS;
