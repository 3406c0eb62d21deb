// QEMU's seccomp sandbox options, and probing which the installed QEMU supports.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { writeFileAtomic } from "@pi-sandbox/config";
import { fileIdentity, hostBootId, qemuWords } from "./kvm-probe.js";

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
 * With `cacheDir`, a conclusive answer is also kept there for the host's boot and that binary:
 * each instance's controller is a process of its own, and the probe (a QEMU start, most of a
 * second under load) would otherwise run at every start.
 */
export function probeQemuSeccomp(emulatorPath: string, options: { cacheDir?: string } = {}): Promise<SeccompSupport> {
  if (process.platform !== "linux") {
    return Promise.resolve({ supported: false, problem: `seccomp filters exist only on Linux (${process.platform})` });
  }
  const key = fileIdentity(emulatorPath);
  let found = cache.get(key);
  if (!found) {
    const file = options.cacheDir ? storedFile(options.cacheDir, key) : undefined;
    const stored = file ? readStored(file, key) : undefined;
    const probing: Promise<ProbeOutcome> = stored ? Promise.resolve(stored) : runProbe(emulatorPath);
    found = probing.then(async ({ inconclusive, ...support }) => {
      if (inconclusive) cache.delete(key);
      else if (file && !stored) {
        // Best effort: without the file, the next controller probes again.
        await writeFileAtomic(file, JSON.stringify({ key, bootId: hostBootId(), ...support })).catch(() => undefined);
      }
      return support;
    });
    cache.set(key, found);
  }
  return found;
}

/** Forgets this process's answers, as a new process starts without them (tests). */
export function forgetSeccompProbes(): void {
  cache.clear();
}

/** Where the answer for binary `key` is kept in `cacheDir`. */
function storedFile(cacheDir: string, key: string): string {
  return path.join(cacheDir, `seccomp-${createHash("sha256").update(key).digest("hex").slice(0, 24)}.json`);
}

/** The kept answer for binary `key` from this host boot, if there is one. */
function readStored(file: string, key: string): SeccompSupport | undefined {
  try {
    const stored = JSON.parse(fs.readFileSync(file, "utf8")) as Partial<SeccompSupport> & {
      key?: string;
      bootId?: string;
    };
    if (stored.key !== key || stored.bootId !== hostBootId() || typeof stored.supported !== "boolean") return undefined;
    return { supported: stored.supported, ...(typeof stored.problem === "string" ? { problem: stored.problem } : {}) };
  } catch {
    return undefined;
  }
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
