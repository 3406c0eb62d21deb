// A hostile agent for hostile-agent.test.ts: a test scripts what it writes on stdout and stderr,
// line by line, as guest root could, and sees every request the client sent.
import { PassThrough, Writable } from "node:stream";
import type { GuestExecution, GuestExitStatus, GuestVm } from "@pi-sandbox/vm";
import { isSupervisorError, type SupervisorError } from "../../src/index.js";
import { PROTOCOL_VERSION } from "../../src/protocol.js";

/** A request as the host sent it. */
export interface SentRequest {
  id: number;
  op: string;
  args: Record<string, unknown>;
}

/**
 * A stand-in for the agent's exec that a test scripts line by line: it sees every request and
 * writes whatever it likes on stdout and stderr, as guest root could.
 */
export class ScriptedAgent {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly requests: SentRequest[] = [];
  stdinEnded = false;
  /** Whether the end of its input ends it, as for the real agent (false: a writer keeps its stdout open). */
  exitOnEndOfInput = true;
  /** Answers a request; the default answers hello and leaves everything else unanswered. */
  onRequest: (request: SentRequest) => void = (request) => {
    if (request.op === "hello") this.reply(request.id, { protocol: PROTOCOL_VERSION });
  };
  private finish!: (status: GuestExitStatus) => void;
  readonly result = new Promise<GuestExitStatus>((resolve) => {
    this.finish = resolve;
  });
  readonly execution: GuestExecution;

  constructor() {
    let partial = "";
    const stdin = new Writable({
      write: (chunk: Buffer, _encoding, callback) => {
        partial += chunk.toString("utf8");
        for (let nl = partial.indexOf("\n"); nl !== -1; nl = partial.indexOf("\n")) {
          const request = JSON.parse(partial.slice(0, nl)) as SentRequest;
          partial = partial.slice(nl + 1);
          this.requests.push(request);
          if (request.op === "shutdown") {
            this.reply(request.id, {});
            this.exit(0);
          } else this.onRequest(request);
        }
        callback();
      },
      final: (callback) => {
        // Like the real agent: end of input stops it.
        this.stdinEnded = true;
        if (this.exitOnEndOfInput) this.exit(0);
        callback();
      },
    });
    this.execution = { stdin, stdout: this.stdout, stderr: this.stderr, result: this.result };
  }

  /** Writes one protocol line. */
  send(message: unknown): void {
    if (this.stdout.writableEnded) return;
    this.stdout.write(`${JSON.stringify(message)}\n`);
  }

  reply(id: number, result: unknown): void {
    this.send({ id, ok: true, result });
  }

  hello(pid = 4242): void {
    this.send({
      event: "hello",
      data: {
        protocol: PROTOCOL_VERSION,
        version: "test",
        pid,
        python: "3.11.2",
        stateDir: "/var/lib/pi-sandbox-agent",
        workspace: "/workspace",
        shell: "/bin/bash",
        cleanup: "environ",
        warmShell: true,
      },
    });
  }

  /** The last request sent with `op`, once it arrives. */
  async next(op: string): Promise<SentRequest> {
    for (let i = 0; i < 500; i++) {
      const found = this.requests.findLast((r) => r.op === op);
      if (found) return found;
      await new Promise((r) => setTimeout(r, 2));
    }
    throw new Error(`no ${op} request arrived`);
  }

  exit(code: number): void {
    if (this.stdout.writableEnded) return;
    this.stdout.end();
    this.stderr.end();
    this.finish({ exitCode: code });
  }
}

/** A guest whose agent launch (the exec with `--attach`) is `agent` (aborting ends it with code 137); other execs succeed. */
export function scriptedVm(agent: ScriptedAgent): GuestVm & { execs: number } {
  const vm = {
    name: "scripted",
    execs: 0,
    hostPid: undefined,
    closed: false,
    exec(command: string | readonly string[], options: { signal?: AbortSignal } = {}): GuestExecution {
      vm.execs++;
      // Anything but the agent's launch (an install) succeeds at once.
      if (!command.includes("--attach")) {
        const out = new PassThrough();
        const err = new PassThrough();
        out.end();
        err.end();
        return { stdin: null, stdout: out, stderr: err, result: Promise.resolve({ exitCode: 0 }) };
      }
      options.signal?.addEventListener("abort", () => agent.exit(137), { once: true });
      agent.hello();
      return agent.execution;
    },
    readFile: () => Promise.reject(new Error("unused")),
    writeFile: () => Promise.reject(new Error("unused")),
    connectTcp: () => Promise.reject(new Error("unused")),
    enableSsh: () => Promise.reject(new Error("unused")),
    close: () => Promise.resolve(),
  };
  return vm as unknown as GuestVm & { execs: number };
}

/** The SupervisorError `promise` rejects with (anything else fails the test). */
export async function rejection(promise: Promise<unknown>): Promise<SupervisorError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!isSupervisorError(error)) throw new Error(`expected a SupervisorError, got ${String(error)}`);
  return error;
}
