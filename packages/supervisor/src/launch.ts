import type { GuestVm } from "@pi-sandbox/vm";
import { readAgentScript } from "./agent-script.js";
import type { AgentChannel } from "./channel.js";
import { SupervisorError } from "./errors.js";
import type { AgentHello } from "./types.js";

/** Wire protocol version this client speaks. */
export const PROTOCOL_VERSION = 1;

/** Checks for python3 and writes the agent script into the guest, in one exec fed on stdin. */
export async function installAgent(vm: GuestVm, agentPath: string, python: string, signal: AbortSignal | undefined) {
  const source = await readAgentScript();
  const dir = agentPath.replace(/\/[^/]*$/, "") || "/";
  // One exec: check python, then write the script atomically. File ops are avoided on purpose:
  // Gondolin serialises them behind execs, and this keeps install and launch on one path.
  const script = [
    'command -v "$0" >/dev/null 2>&1 || { echo "python3 ($0) not found in the guest" >&2; exit 127; }',
    'mkdir -p "$1"',
    'cat > "$2.tmp"',
    'mv -f "$2.tmp" "$2"',
  ].join(" && ");
  const execution = vm.exec(["/bin/sh", "-c", script, python, dir, agentPath], { stdin: source, signal });
  const stderr: Buffer[] = [];
  execution.stdout.resume();
  execution.stderr.on("data", (chunk: Buffer) => stderr.push(chunk));
  const status = await execution.result;
  const text = Buffer.concat(stderr).toString("utf8").trim();
  if (status.exitCode === 127) {
    throw new SupervisorError(
      "GUEST_PYTHON_MISSING",
      `the guest image has no ${python}; commands and services need it — use an image that includes python3`,
      { details: { tool: python, stderr: text } },
    );
  }
  if (status.exitCode !== 0) {
    throw new SupervisorError(
      "AGENT_START_FAILED",
      `could not install the guest agent at ${agentPath} (exit ${status.exitCode}): ${text || "no output"}`,
      { details: { exitCode: status.exitCode, stderr: text } },
    );
  }
}

/** Resolves with the agent's hello event; rejects on a fatal event, exit, timeout or abort. */
export async function waitForHello(channel: AgentChannel, timeoutMs: number, signal: AbortSignal | undefined) {
  return new Promise<AgentHello>((resolve, reject) => {
    const cleanups: (() => void)[] = [];
    const done = (): void => cleanups.forEach((fn) => fn());
    const timer = setTimeout(() => {
      done();
      reject(
        new SupervisorError(
          "AGENT_START_FAILED",
          `the guest agent did not start within ${timeoutMs} ms; ${tail(channel)}`,
          {
            details: { timeoutMs, stderr: channel.stderr },
          },
        ),
      );
    }, timeoutMs);
    cleanups.push(() => clearTimeout(timer));
    cleanups.push(
      channel.onEvent((event) => {
        if (event.event === "hello") {
          done();
          const hello = event.data as unknown as AgentHello;
          if (hello.protocol !== PROTOCOL_VERSION) {
            reject(
              new SupervisorError(
                "AGENT_PROTOCOL",
                `the guest agent speaks protocol ${hello.protocol}, this client ${PROTOCOL_VERSION}; reinstall matching packages`,
                { details: { hello } },
              ),
            );
          } else resolve(hello);
        } else if (event.event === "fatal") {
          done();
          reject(
            new SupervisorError(
              "AGENT_START_FAILED",
              `the guest agent could not start: ${String(event.data.message)}`,
              {
                details: event.data,
              },
            ),
          );
        }
      }),
    );
    const onAbort = (): void => {
      done();
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    cleanups.push(() => signal?.removeEventListener("abort", onAbort));
    void channel.finished.then(() => {
      done();
      reject(
        new SupervisorError("AGENT_START_FAILED", `the guest agent exited before it started; ${tail(channel)}`, {
          details: { exitCode: channel.exitStatus?.exitCode, stderr: channel.stderr },
        }),
      );
    });
  });
}

function tail(channel: AgentChannel): string {
  const text = channel.stderr.trim();
  return text ? `its last output: ${text.slice(-500)}` : "it wrote nothing to stderr";
}
