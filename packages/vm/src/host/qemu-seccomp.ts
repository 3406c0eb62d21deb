// QEMU's seccomp sandbox options, and probing which the installed QEMU supports.
import { spawn } from "node:child_process";
import fs from "node:fs";
import { qemuWords } from "./kvm-probe.js";

/**
 * QEMU's own seccomp filter: no obsolete system calls, no set*uid/setgid/capset, no
 * fork/clone-for-a-process/exec, no scheduler or priority changes. A guest that escapes into
 * QEMU through a device bug then cannot start a shell or a helper, nor regain privileges.
 * (It does not restrict which files QEMU can open; see the package README.)
 */
export const QEMU_SANDBOX_OPTIONS = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/** Whether this QEMU can run under {@link QEMU_SANDBOX_OPTIONS} here. */
export interface SeccompSupport {
  /** True when QEMU started and quit cleanly with the sandbox on. */
  supported: boolean;
  /** Why not, in QEMU's words (when `supported` is false). */
  problem?: string;
}

const PROBE_TIMEOUT_MS = 30_000;
const cache = new Map<string, Promise<SeccompSupport>>();

/**
 * Asks `emulatorPath` once per process (per binary: path, size, mtime) whether it runs with the
 * sandbox on: QEMU without seccomp support ("no option group 'sandbox'") or a kernel without
 * seccomp filters makes it exit at once with an error. A probe that does not finish in 30 s
 * proves nothing and is not cached; the sandbox then stays on and the boot reports any failure.
 */
export function probeQemuSeccomp(emulatorPath: string): Promise<SeccompSupport> {
  if (process.platform !== "linux") {
    return Promise.resolve({ supported: false, problem: `seccomp filters exist only on Linux (${process.platform})` });
  }
  let key = emulatorPath;
  try {
    const stat = fs.statSync(emulatorPath);
    key = `${emulatorPath}\0${stat.size}\0${stat.mtimeMs}`;
  } catch {
    // Unreadable: the probe's spawn reports it.
  }
  let found = cache.get(key);
  if (!found) {
    const probing = runProbe(emulatorPath);
    found = probing.then(({ inconclusive, ...support }) => {
      if (inconclusive) cache.delete(key);
      return support;
    });
    cache.set(key, found);
  }
  return found;
}

interface ProbeOutcome extends SeccompSupport {
  /** Set when the probe was inconclusive (timed out); not cached. */
  inconclusive?: true;
}

function runProbe(emulatorPath: string): Promise<ProbeOutcome> {
  // No guest, no devices: QEMU sets up its sandbox, answers QMP on stdin/stdout, and quits.
  const args = ["-sandbox", QEMU_SANDBOX_OPTIONS, "-machine", "none", "-nodefaults", "-no-user-config"];
  args.push("-display", "none", "-S", "-qmp", "stdio");
  return new Promise((resolve) => {
    let stderr = "";
    let settled = false;
    const finish = (outcome: ProbeOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(outcome);
    };
    let child: ReturnType<typeof spawn>;
    try {
      child = spawn(emulatorPath, args, { stdio: ["pipe", "ignore", "pipe"] });
    } catch (error) {
      finish({ supported: false, problem: `QEMU could not be started: ${(error as Error).message}` });
      return;
    }
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      finish({ supported: true, inconclusive: true });
    }, PROBE_TIMEOUT_MS);
    child.stderr!.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-8192)));
    child.stdin!.on("error", () => undefined);
    child.stdin!.end('{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n');
    child.once("error", (error) =>
      finish({ supported: false, problem: `QEMU could not be started: ${error.message}` }),
    );
    child.once("close", (code, signal) => {
      if (code === 0) return finish({ supported: true });
      const said = qemuWords(stderr);
      finish({ supported: false, problem: said || `QEMU exited (${signal ?? `code ${code}`}) with the sandbox on` });
    });
  });
}
