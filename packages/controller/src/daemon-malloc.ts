// glibc's malloc in a daemon process. It raises its mmap threshold each time a large block is
// freed, so after a suspend or wake had streamed the guest's memory through the daemon (64 KiB
// socket reads, hundreds of MiB) those blocks came from the heap and stayed resident: a daemon grew
// from 100 to 120-130 MiB. A fixed 64 KiB threshold returns them (measured: 97 MiB running, 105
// after a suspend and a wake; preview throughput unchanged). Only the daemon's own Node wants it:
// QEMU does block I/O in buffers of that size, so the daemon drops it before starting children.

/** Set beside the threshold when the spawn chose it (a value the user set is left alone). */
const MARK = "PI_SANDBOX_DAEMON_MALLOC";

/** What a daemon's environment adds to `env`: the fixed threshold, unless `env` has one. */
export function daemonMallocEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return env.MALLOC_MMAP_THRESHOLD_ === undefined ? { MALLOC_MMAP_THRESHOLD_: "65536", [MARK]: "1" } : {};
}

/**
 * In the daemon, at its start: glibc has read the threshold already; removing it from the
 * environment keeps it from the processes the daemon starts (QEMU, ssh).
 */
export function forgetDaemonMalloc(env: NodeJS.ProcessEnv = process.env): void {
  if (env[MARK] !== "1") return;
  delete env.MALLOC_MMAP_THRESHOLD_;
  delete env[MARK];
}
