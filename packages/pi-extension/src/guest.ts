// One attached instance as Pi's tools see it: commands and files over the controller's exec,
// exec-status, exec-kill, read and write actions. Nothing the guest returns is trusted: sizes,
// base64 and probe lines are checked, and every transfer is bounded.

import { shellQuote } from "@pi-sandbox/config";
import type { ExecView } from "@pi-sandbox/controller/client";
import type { CallActionFn } from "./tool.js";

/** Raw bytes per read chunk: its base64 (61,440 characters) stays under the 64 KiB output cap. */
export const READ_CHUNK_BYTES = 45 * 1024;
/** Read chunks in flight at once for a file of several chunks. */
const READ_PARALLEL = 4;
/** Largest file read whole (edit, images, read without streaming). */
export const READ_MAX_BYTES = 32 * 1024 * 1024;
/** Raw bytes per write part when a file is larger than the write action takes. */
const WRITE_PART_BYTES = 600 * 1024;
/** Largest file written. */
export const WRITE_MAX_BYTES = 32 * 1024 * 1024;
/** The write action's limit (1 MiB), as the controller's help states it. */
const WRITE_ACTION_MAX_BYTES = 1024 * 1024;
/** How long one exec or exec-status call waits while a command streams, in ms. */
const STREAM_WAIT_MS = 1_000;
/** The same for helper commands, whose output nobody watches: fewer round trips. */
const HELPER_POLL_MS = 5_000;
/** Longest a helper command (probe, stat, listing, search, file chunk) may run before it is killed. */
const HELPER_WAIT_MS = 60_000;

/** What the attach probe found in the guest. */
export interface GuestFacts {
  /** The workspace (the exec default directory), absolute. */
  workspace: string;
  /** fd's name in the guest (`fd`, `fdfind`), when present. */
  fd?: string;
  /** Whether ripgrep is present. */
  rg: boolean;
  /** Whether grep takes -P (PCRE), closest to ripgrep's syntax. */
  grepPcre: boolean;
}

/** Options of one streamed command. */
export interface StreamOptions {
  /** Receives output as it arrives. */
  onData: (data: Buffer) => void;
  /** Aborts the command (its process group is killed). */
  signal?: AbortSignal;
  /** Seconds after which the command is killed. */
  timeoutSeconds?: number;
  /** How long each exec/exec-status call waits, in ms (default 1 s: output shows as it comes). */
  pollMs?: number;
}

/** A failure the guest reported about a path (missing, a directory, not readable). */
export class GuestPathError extends Error {
  override readonly name = "GuestPathError";
  constructor(
    readonly code: "ENOENT" | "EISDIR" | "EACCES" | "ENOTREG" | "EFBIG",
    readonly path: string,
    message: string,
  ) {
    super(message);
  }
}

const PATH_MESSAGES: Record<GuestPathError["code"], string> = {
  ENOENT: "no such file or directory",
  EISDIR: "is a directory",
  EACCES: "permission denied",
  ENOTREG: "not a regular file",
  EFBIG: "file too large",
};

function pathError(code: GuestPathError["code"], path: string, detail = ""): GuestPathError {
  return new GuestPathError(code, path, `${code}: ${PATH_MESSAGES[code]}${detail}, '${path}'`);
}

/** Shell that prints ENOENT/EISDIR/EACCES/ENOTREG and exits 2 unless `$f` is a readable regular file. */
const CHECK_READABLE = [
  `if [ ! -e "$f" ]; then echo ENOENT; exit 2; fi`,
  `if [ -d "$f" ]; then echo EISDIR; exit 2; fi`,
  `if [ ! -f "$f" ]; then echo ENOTREG; exit 2; fi`,
  `if [ ! -r "$f" ]; then echo EACCES; exit 2; fi`,
].join("; ");

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function parseSize(line: string | undefined): number {
  const text = (line ?? "").trim();
  if (!/^\d{1,15}$/.test(text))
    throw new Error(`the guest reported no usable file size (${JSON.stringify(text.slice(0, 40))})`);
  return Number(text);
}

/** The commands and files of one attached instance. */
export class GuestInstance {
  constructor(
    readonly name: string,
    private readonly callAction: CallActionFn,
    private readonly env: NodeJS.ProcessEnv | undefined,
    /** Filled by probe(). */
    public facts: GuestFacts = { workspace: "/workspace", rg: false, grepPcre: false },
  ) {}

  private call<T>(action: Record<string, unknown>, signal?: AbortSignal): Promise<T> {
    return this.callAction({ ...action, name: this.name }, { env: this.env, signal, caller: "user" }) as Promise<T>;
  }

  /** Ends a command and its process group; a command that already ended is fine. */
  private async kill(pid: string): Promise<void> {
    await this.call({ action: "exec-kill", pid }).catch(() => undefined);
  }

  /**
   * Runs a helper command (probe, stat, listing, search, file chunk) in the workspace and returns
   * its output and exit code. The caller bounds the output in the command. Abort, or a minute
   * without an end, kills the command's process group in the guest.
   */
  async run(cmd: string, signal?: AbortSignal): Promise<{ exitCode: number; output: string }> {
    const chunks: Buffer[] = [];
    try {
      const { exitCode } = await this.stream(cmd, this.facts.workspace, {
        onData: (data) => chunks.push(data),
        signal,
        timeoutSeconds: HELPER_WAIT_MS / 1000,
        pollMs: HELPER_POLL_MS,
      });
      return { exitCode: exitCode ?? -1, output: Buffer.concat(chunks).toString("utf8") };
    } catch (error) {
      const message = error instanceof Error ? error.message : "";
      if (message === "aborted") throw new Error("Operation aborted");
      if (message.startsWith("timeout:")) {
        throw new Error(
          `a helper command in ${this.name} did not finish within ${HELPER_WAIT_MS / 1000} s and was ended`,
        );
      }
      throw error;
    }
  }

  /** Learns the workspace and which search tools the guest has. */
  async probe(signal?: AbortSignal): Promise<GuestFacts> {
    const script = [
      "pwd",
      "for t in fd fdfind; do if command -v $t >/dev/null 2>&1; then echo fd=$t; break; fi; done",
      "command -v rg >/dev/null 2>&1 && echo rg=yes",
      "grep -P x /dev/null >/dev/null 2>&1; [ $? -eq 1 ] && echo pcre=yes",
      "true",
    ].join("\n");
    const { output } = await this.run(script, signal);
    const lines = output.split("\n").map((l) => l.trim());
    const workspace = lines[0] ?? "";
    if (!workspace.startsWith("/") || workspace.length > 4096 || /[\0-\x1f\x7f]/.test(workspace)) {
      throw new Error(`the guest reported no usable workspace path (${JSON.stringify(workspace.slice(0, 80))})`);
    }
    const fd = lines.find((l) => l === "fd=fd" || l === "fd=fdfind")?.slice(3);
    this.facts = {
      workspace,
      rg: lines.includes("rg=yes"),
      grepPcre: lines.includes("pcre=yes"),
      ...(fd ? { fd } : {}),
    };
    return this.facts;
  }

  /**
   * Runs a command the way Pi's bash tool expects: output streamed to onData as it arrives, the
   * exit code at the end (128+N after signal N). Abort and timeout kill the command's process
   * group and throw `aborted` / `timeout:<seconds>`, the messages Pi's bash tool understands.
   */
  async stream(command: string, cwd: string, options: StreamOptions): Promise<{ exitCode: number | null }> {
    const { signal, onData, timeoutSeconds } = options;
    const wait = options.pollMs ?? STREAM_WAIT_MS;
    if (signal?.aborted) throw new Error("aborted");
    const deadline = timeoutSeconds && timeoutSeconds > 0 ? Date.now() + timeoutSeconds * 1000 : undefined;
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const timer = deadline === undefined ? undefined : setTimeout(() => stop.abort(), deadline - Date.now());
    let pid: string | undefined;
    try {
      const cmd = cwd === this.facts.workspace ? command : `cd -- ${shellQuote(cwd)} || exit 1\n${command}`;
      // The first call is waited for even after an abort: only its answer names the command to kill.
      let view = await this.call<ExecView>({ action: "exec", cmd, timeoutMs: wait });
      pid = view.pid;
      for (;;) {
        if (view.output) onData(Buffer.from(view.output, "utf8"));
        if (!view.running) return { exitCode: typeof view.exitCode === "number" ? view.exitCode : null };
        stop.signal.throwIfAborted();
        view = await this.call<ExecView>({ action: "exec-status", pid, timeoutMs: wait }, stop.signal);
      }
    } catch (error) {
      if (!stop.signal.aborted) throw error;
      if (pid !== undefined) await this.kill(pid);
      if (signal?.aborted) throw new Error("aborted");
      throw new Error(`timeout:${timeoutSeconds}`);
    } finally {
      if (timer) clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Throws a GuestPathError unless the path is a readable regular file. */
  async checkReadable(path: string, alsoWritable = false): Promise<void> {
    const writable = alsoWritable ? `; if [ ! -w "$f" ]; then echo EACCES; exit 2; fi` : "";
    const { exitCode, output } = await this.run(`f=${shellQuote(path)}; ${CHECK_READABLE}${writable}; echo ok`);
    if (exitCode === 0 && output.trim() === "ok") return;
    throw this.pathFailure(output, path);
  }

  private pathFailure(output: string, path: string): Error {
    const code = output.trim().split("\n")[0] as GuestPathError["code"];
    if (code in PATH_MESSAGES) return pathError(code, path);
    return new Error(`reading ${path} in ${this.name} failed: ${output.trim().slice(0, 200)}`);
  }

  /** One chunk of a file and the file's size, binary-exact (base64 over exec). */
  async readChunk(path: string, offset: number, signal?: AbortSignal): Promise<{ size: number; data: Buffer }> {
    const cmd = [
      `f=${shellQuote(path)}; ${CHECK_READABLE}`,
      `wc -c < "$f"`,
      `tail -c +${offset + 1} -- "$f" | head -c ${READ_CHUNK_BYTES} | base64 | tr -d '\\n'; echo`,
    ].join("\n");
    const { exitCode, output } = await this.run(cmd, signal);
    if (exitCode !== 0) throw this.pathFailure(output, path);
    const [sizeLine, encoded = ""] = output.split("\n");
    const size = parseSize(sizeLine);
    if (!BASE64.test(encoded)) throw new Error(`the guest sent a malformed chunk of ${path}`);
    const data = Buffer.from(encoded, "base64");
    if (data.length > READ_CHUNK_BYTES) throw new Error(`the guest sent more of ${path} than was asked for`);
    return { size, data };
  }

  /** Streams a file in chunks, stopping at `maxBytes` (an error) or when the signal aborts. */
  async *readStream(path: string, options: { signal?: AbortSignal; maxBytes?: number } = {}): AsyncGenerator<Buffer> {
    const max = options.maxBytes ?? READ_MAX_BYTES;
    const first = await this.readChunk(path, 0, options.signal);
    const size = first.size;
    if (size > max) throw pathError("EFBIG", path, ` (${size} bytes; at most ${max} are read)`);
    if (first.data.length > 0) yield first.data;
    if (first.data.length < READ_CHUNK_BYTES) return;
    // The rest of the size read first, a few chunks in flight at once (the daemon runs execs
    // side by side), yielded in order. A file that grew meanwhile ends at its first size.
    const window: Promise<{ data: Buffer }>[] = [];
    let next = READ_CHUNK_BYTES;
    const fill = () => {
      while (window.length < READ_PARALLEL && next < size) {
        const chunk = this.readChunk(path, next, options.signal);
        chunk.catch(() => undefined); // awaited in order below; a later failure must not go unhandled
        window.push(chunk);
        next += READ_CHUNK_BYTES;
      }
    };
    fill();
    while (window.length > 0) {
      if (options.signal?.aborted) return;
      const { data } = await window.shift()!;
      if (data.length > 0) yield data;
      if (data.length < READ_CHUNK_BYTES) return; // the file shrank
      fill();
    }
  }

  /** The whole file, binary-exact, at most READ_MAX_BYTES. */
  async readFile(path: string, signal?: AbortSignal): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const part of this.readStream(path, { signal })) parts.push(part);
    return Buffer.concat(parts);
  }

  /** Writes a text file atomically (keeping its mode); the parent directory must exist. */
  async writeFile(path: string, content: string): Promise<void> {
    const bytes = Buffer.from(content, "utf8");
    if (bytes.length > WRITE_MAX_BYTES)
      throw pathError("EFBIG", path, ` (${bytes.length} bytes; at most ${WRITE_MAX_BYTES})`);
    if (bytes.length <= WRITE_ACTION_MAX_BYTES) {
      await this.call({ action: "write", path, content });
      return;
    }
    // Larger than one write: base64 parts next to the file, joined and decoded in the guest.
    const stem = `${path}.pi-sandbox-${process.pid}-${Date.now()}`;
    const parts: string[] = [];
    try {
      for (let at = 0; at < bytes.length; at += WRITE_PART_BYTES) {
        const part = `${stem}.${parts.length}`;
        parts.push(part);
        await this.call({
          action: "write",
          path: part,
          content: bytes.subarray(at, at + WRITE_PART_BYTES).toString("base64"),
        });
      }
      const list = parts.map(shellQuote).join(" ");
      const tmp = shellQuote(`${stem}.tmp`);
      const target = shellQuote(path);
      const cmd = [
        `cat ${list} | base64 -d > ${tmp} || exit 1`,
        `[ "$(wc -c < ${tmp})" -eq ${bytes.length} ] || { echo "size mismatch"; exit 1; }`,
        `if [ -e ${target} ]; then chmod --reference=${target} ${tmp} 2>/dev/null; fi`,
        `mv -f ${tmp} ${target}`,
      ].join("\n");
      const { exitCode, output } = await this.run(cmd);
      if (exitCode !== 0) throw new Error(`writing ${path} in ${this.name} failed: ${output.trim().slice(0, 200)}`);
    } finally {
      if (parts.length > 0)
        await this.run(`rm -f ${parts.map(shellQuote).join(" ")} ${shellQuote(`${stem}.tmp`)}`).catch(() => undefined);
    }
  }

  /** `mkdir -p`. */
  async mkdir(path: string): Promise<void> {
    const { exitCode, output } = await this.run(`mkdir -p -- ${shellQuote(path)} 2>&1`);
    if (exitCode !== 0) throw new Error(`mkdir ${path} in ${this.name} failed: ${output.trim().slice(0, 200)}`);
  }
}
