// The only door into the guest: commands and files through the exec, exec-status, exec-kill,
// write, upload and read actions of @pi-sandbox/controller/client (the instance's own actions are
// called from instance.ts, add-secrets.ts and host-secrets.ts).
import { callAction, type CallActionOptions } from "@pi-sandbox/controller/client";

/** A finished guest command. */
export interface GuestResult {
  /** Exit status. */
  exitCode: number;
  /** Combined output (each exec caps it at 64 KiB; steps keep full logs in guest files). */
  output: string;
}

/** What a refresh needs from an instance. A seam: tests of the orchestration pass a fake. */
export interface GuestSession {
  /** Runs a login-shell command to completion, following it past the 60 s exec wait. */
  exec(cmd: string, options?: { deadlineMs?: number; signal?: AbortSignal }): Promise<GuestResult>;
  /** Writes a text file (parent directory must exist, at most 1 MiB). */
  write(path: string, content: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Reads a text file (at most 64 KiB). */
  read(path: string, options?: { signal?: AbortSignal }): Promise<string>;
  /**
   * Copies one host file to a guest path (at most 256 MiB; the parent directory must exist). The
   * guest checks its sha256 before renaming it into place; resolves with that sha256.
   */
  upload(
    hostPath: string,
    guestPath: string,
    options?: { signal?: AbortSignal },
  ): Promise<{ sha256: string; bytes: number }>;
}

/** Options for reaching instances: the controller client's env (state root) and cwd. */
export type ControllerOptions = Pick<CallActionOptions, "env" | "cwd">;

const EXEC_WAIT_MS = 60_000;

interface ExecReply {
  running: boolean;
  pid?: string;
  exitCode?: number;
  output?: string;
}

/** A GuestSession for instance `name`, through `callAction` (or `call`, a seam for tests). */
export function controllerGuest(
  name: string,
  options: ControllerOptions = {},
  callController: (input: unknown, options?: CallActionOptions) => Promise<unknown> = callAction,
): GuestSession {
  const call = (action: Record<string, unknown>, signal?: AbortSignal) =>
    callController({ ...action, name }, { ...options, signal });
  return {
    async exec(cmd, { deadlineMs = 30 * 60_000, signal } = {}) {
      const started = Date.now();
      let reply = (await call({ action: "exec", cmd, timeoutMs: EXEC_WAIT_MS }, signal)) as ExecReply;
      let output = reply.output ?? "";
      while (reply.running) {
        if (Date.now() - started > deadlineMs) {
          // The wait is ours to end; the command would keep running, so stop it.
          await call({ action: "exec-kill", pid: reply.pid }).catch(() => undefined);
          return { exitCode: 124, output: `${output}\n[review-setup] gave up after ${deadlineMs} ms\n` };
        }
        reply = (await call({ action: "exec-status", pid: reply.pid, timeoutMs: EXEC_WAIT_MS }, signal)) as ExecReply;
        output += reply.output ?? "";
      }
      return { exitCode: reply.exitCode ?? -1, output };
    },
    async write(path, content, { signal } = {}) {
      await call({ action: "write", path, content }, signal);
    },
    async upload(hostPath, guestPath, { signal } = {}) {
      const reply = (await call({ action: "upload", from: hostPath, to: guestPath }, signal)) as {
        files: number;
        bytes: number;
        sha256?: string;
      };
      if (reply.files !== 1 || reply.sha256 === undefined) {
        throw new Error(`uploading ${hostPath} copied ${reply.files} files instead of one`);
      }
      return { sha256: reply.sha256, bytes: reply.bytes };
    },
    async read(path, { signal } = {}) {
      const reply = (await call({ action: "read", path }, signal)) as { content: string };
      return reply.content;
    },
  };
}
