// Running a command in a guest to completion, and naming how an execution ended.
import os from "node:os";
import { PassThrough, type Readable } from "node:stream";
import type { GuestExecOptions, GuestExecution, GuestRunResult, GuestVm } from "./guest-vm.js";

/** Signal name for a number (`9` → `SIGKILL`). */
export function signalName(signal: number | undefined): string | undefined {
  if (signal === undefined || signal === 0) return undefined;
  for (const [name, value] of Object.entries(os.constants.signals)) {
    if (value === signal) return name;
  }
  return `SIG${signal}`;
}

/** An execution that never ran: empty streams and a rejected result. */
export function failedExecution(error: unknown): GuestExecution {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  stdout.end();
  stderr.end();
  const result = Promise.reject(error);
  result.catch(() => undefined);
  return { stdin: null, stdout, stderr, result };
}

async function collect(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
  return Buffer.concat(chunks).toString("utf8");
}

/** Runs a guest command to completion and collects its output as text. A non-zero exit resolves. */
export async function runInGuest(
  vm: Pick<GuestVm, "exec">,
  command: string | readonly string[],
  options: GuestExecOptions = {},
): Promise<GuestRunResult> {
  const execution = vm.exec(command, options);
  const [stdout, stderr, status] = await Promise.all([
    collect(execution.stdout),
    collect(execution.stderr),
    execution.result,
  ]);
  return { ...status, stdout, stderr };
}
