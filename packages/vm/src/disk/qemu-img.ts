// qemu-img: creating, inspecting and committing qcow2 layers, with its failures typed.
import { execFile } from "node:child_process";
import path from "node:path";
import { VmError, messageOf } from "../errors.js";
import { findExecutable } from "../host/host-facts.js";
import { hostDiskFullError } from "../host/host-disk.js";

/** What `qemu-img info --output=json` tells about one image (the fields we use). */
export interface QemuImageInfo {
  /** Guest-visible size in bytes. */
  virtualSize: number;
  /** `qcow2`, `raw`, ... */
  format: string;
  /** The backing file name as stored in the header (may be relative). */
  backingFilename?: string;
  /** The backing file resolved by QEMU. */
  fullBackingFilename?: string;
  /** Bytes the file occupies on the host. */
  actualSize: number;
}

/** A `qemu-img` invocation; injectable for tests. */
export type QemuImgRunner = (args: readonly string[], options?: { signal?: AbortSignal }) => Promise<string>;

/** Maps a failed qemu-img or QEMU run to a {@link VmError}: never a raw QEMU message on its own. */
export function mapQemuFailure(stderr: string, context: { action: string; path?: string }, cause?: unknown): VmError {
  const text = stderr.trim();
  const details: Record<string, unknown> = { qemuOutput: text, ...(context.path ? { path: context.path } : {}) };
  if (/Failed to get "?\w+"? lock|Is another process using the image/i.test(text)) {
    return new VmError(
      "VM_DISK_BUSY",
      `${context.action}: the disk${context.path ? ` ${context.path}` : ""} is in use by another QEMU process`,
      { hint: "stop the VM using it first", cause, details },
    );
  }
  if (/No space left on device/i.test(text)) {
    return hostDiskFullError({
      dir: context.path ? path.dirname(context.path) : process.cwd(),
      situation: "disk",
      action: context.action,
      cause,
      details,
    });
  }
  const missing = /Could not open '([^']+)': No such file or directory/.exec(text);
  if (missing) {
    return new VmError(
      "VM_DISK_NOT_FOUND",
      `${context.action}: ${missing[1]} does not exist; the disk or the image it was created from is gone`,
      { cause, details: { ...details, missingPath: missing[1] } },
    );
  }
  if (
    /Image is not in qcow2 format|Could not read qcow2 header|Image is corrupt|qcow2: Marking image as corrupt/i.test(
      text,
    )
  ) {
    return new VmError(
      "VM_DISK_CORRUPT",
      `${context.action}: the disk file${context.path ? ` ${context.path}` : ""} is damaged`,
      { hint: "restore it from a template or destroy and recreate the instance", cause, details },
    );
  }
  return new VmError("VM_DISK_FAILED", `${context.action} failed${text ? `: ${firstLine(text)}` : ""}`, {
    hint: "see details.qemuOutput",
    cause,
    details,
  });
}

function firstLine(text: string): string {
  const line = text.split("\n").find((l) => l.trim() !== "") ?? text;
  return line.replace(/^qemu-img: /, "").slice(0, 300);
}

/** The default runner: the `qemu-img` on PATH. */
export function defaultQemuImgRunner(): QemuImgRunner {
  return (args, options = {}) =>
    new Promise((resolve, reject) => {
      const binary = findExecutable("qemu-img");
      if (!binary) {
        reject(
          new VmError("VM_QEMU_MISSING", "qemu-img is not installed or not on PATH", {
            hint: "install QEMU (e.g. apt-get install qemu-utils)",
            details: { tool: "qemu-img" },
          }),
        );
        return;
      }
      // Under setpriv the tool dies with this process: a SIGKILLed owner never leaves a qemu-img
      // writing into a layer that the next owner of the disk is about to open.
      const setpriv = process.platform === "linux" ? findExecutable("setpriv") : undefined;
      const [file, argv] = setpriv ? [setpriv, ["--pdeathsig", "KILL", binary, ...args]] : [binary, [...args]];
      execFile(
        file,
        argv,
        { signal: options.signal, maxBuffer: 16 * 1024 * 1024, encoding: "utf8", env: { ...process.env, LC_ALL: "C" } },
        (error, stdout, stderr) => {
          if (error) {
            if (options.signal?.aborted) {
              reject(options.signal.reason);
              return;
            }
            Object.assign(error, { stderr, stdout });
            reject(error);
            return;
          }
          resolve(stdout);
        },
      );
    });
}

/** Thin typed wrapper over the qemu-img operations the disk store uses. */
export class QemuImg {
  constructor(private readonly run: QemuImgRunner = defaultQemuImgRunner()) {}

  private async call(args: readonly string[], context: { action: string; path?: string }, signal?: AbortSignal) {
    try {
      return await this.run(args, { signal });
    } catch (error) {
      if (signal?.aborted && error === signal.reason) throw error;
      if (error instanceof VmError) throw error;
      const stderr = String((error as { stderr?: unknown }).stderr ?? messageOf(error));
      throw mapQemuFailure(stderr, context, error);
    }
  }

  /**
   * Creates a qcow2 overlay `file` over `backing` (stored as given: pass a bare file name for a
   * backing file in the same directory). `sizeBytes` sets the virtual size; default: the backing's.
   * `unsafe` does not open the backing (`-u`): for one a running QEMU holds; `sizeBytes` is then
   * required.
   */
  async createOverlay(
    file: string,
    backing: string,
    backingFormat: "qcow2" | "raw",
    sizeBytes?: number,
    signal?: AbortSignal,
    options: { unsafe?: boolean } = {},
  ): Promise<void> {
    const args = ["create", "-q", "-f", "qcow2", ...(options.unsafe ? ["-u"] : []), "-b", backing];
    args.push("-F", backingFormat, file);
    if (sizeBytes !== undefined) args.push(String(sizeBytes));
    await this.call(args, { action: "creating a disk layer", path: file }, signal);
  }

  /** Reads an image header. `shared` reads even while a running QEMU holds the image. */
  async info(file: string, options: { shared?: boolean; signal?: AbortSignal } = {}): Promise<QemuImageInfo> {
    const args = ["info", "--output=json"];
    if (options.shared) args.push("-U");
    args.push(file);
    const out = await this.call(args, { action: "reading a disk layer", path: file }, options.signal);
    const raw = JSON.parse(out) as Record<string, unknown>;
    return {
      virtualSize: Number(raw["virtual-size"]),
      format: String(raw["format"]),
      backingFilename: raw["backing-filename"] as string | undefined,
      fullBackingFilename: raw["full-backing-filename"] as string | undefined,
      actualSize: Number(raw["actual-size"] ?? 0),
    };
  }

  /** Writes the clusters of `top` into its backing file, leaving `top` untouched (`-d`). */
  async commitIntoBacking(top: string, signal?: AbortSignal): Promise<void> {
    await this.call(["commit", "-q", "-d", "-f", "qcow2", top], { action: "merging a disk layer", path: top }, signal);
  }

  /**
   * Writes what the chain from `top` down to (not including) `base` holds into `base`, a layer
   * further down `top`'s chain (an absolute path), leaving every layer above it untouched.
   */
  async commitInto(top: string, base: string, signal?: AbortSignal): Promise<void> {
    await this.call(
      ["commit", "-q", "-d", "-f", "qcow2", "-b", base, top],
      { action: "merging disk layers", path: top },
      signal,
    );
  }

  /**
   * Checks a qcow2 image's metadata (`qemu-img check`). Leaked clusters (space allocated but
   * unused, what a QEMU killed mid-write leaves) are harmless: they resolve, with `leaksRemain`,
   * and `repairLeaks` frees them (`-r leaks`, which writes into the image). Corruption rejects
   * with VM_DISK_CORRUPT, its first error line in the message and the report in `details`.
   */
  async check(file: string, options: { repairLeaks?: boolean; signal?: AbortSignal } = {}): Promise<QemuCheckResult> {
    const args = ["check", ...(options.repairLeaks ? ["-r", "leaks"] : []), "-f", "qcow2", file];
    const context = { action: "checking a disk layer", path: file };
    try {
      const report = await this.run(args, { ...(options.signal ? { signal: options.signal } : {}) });
      return { leaksRemain: false, report: report.trim() };
    } catch (error) {
      if (options.signal?.aborted && error === options.signal.reason) throw error;
      if (error instanceof VmError) throw error;
      const { code, stdout, stderr } = error as { code?: unknown; stdout?: unknown; stderr?: unknown };
      const report = `${String(stdout ?? "")}\n${String(stderr ?? messageOf(error))}`.trim();
      // qemu-img check's exit codes: 3 = leaked clusters remain (no corruption), 2 = corrupt.
      if (code === CHECK_LEAKS_REMAIN) return { leaksRemain: true, report };
      if (code === CHECK_CORRUPT) {
        const first = (report.split("\n").find((line) => /^ERROR/.test(line.trim())) ?? firstLine(report))
          .trim()
          .slice(0, 300);
        throw new VmError("VM_DISK_CORRUPT", `${context.action}: the disk file ${file} is damaged (${first})`, {
          hint: "restore it from a template or destroy and recreate the instance",
          cause: error,
          details: { path: file, firstError: first, qemuOutput: report },
        });
      }
      throw mapQemuFailure(String(stderr ?? messageOf(error)), context, error);
    }
  }
}

/** What {@link QemuImg.check} found in an image without corruption. */
export interface QemuCheckResult {
  /** Leaked clusters remain (harmless: allocated host space no guest data uses). */
  leaksRemain: boolean;
  /** qemu-img's report, for details. */
  report: string;
}

/** `qemu-img check` exit code: the check found corruption. */
const CHECK_CORRUPT = 2;
/** `qemu-img check` exit code: leaked clusters remain, nothing corrupt. */
const CHECK_LEAKS_REMAIN = 3;
