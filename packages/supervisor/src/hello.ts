// The start-up exchange with the guest agent over an open channel (a bridge or its TCP door): its
// hello event, then the host's hello with the limits, then the agent's acceptance.
import { AgentChannel } from "./channel.js";
import { SupervisorError, isSupervisorError } from "./errors.js";
import { PROTOCOL_VERSION, helloArgs } from "./protocol.js";
import { BadReply } from "./reply-checks.js";
import { parseHello, parseHelloAck } from "./replies.js";
import type { AgentHello, GuestIdentity } from "./types.js";

/**
 * The start-up exchange: waits for the agent's hello event, checks its protocol version, then
 * sends the host's hello with the limits the agent is to apply (and a new guest's `identity`) and
 * waits for its acceptance. Rejects on a fatal event, a protocol break, exit, timeout or abort.
 */
export async function exchangeHello(
  channel: AgentChannel,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  identity?: GuestIdentity,
): Promise<{ hello: AgentHello; identityApplied: boolean }> {
  const deadline = Date.now() + timeoutMs;
  const hello = await waitForHello(channel, timeoutMs, signal);
  try {
    const ack = await channel.request("hello", helloArgs(identity), parseHelloAck(PROTOCOL_VERSION), {
      signal,
      timeoutMs: Math.max(1, deadline - Date.now()),
    });
    return { hello, identityApplied: identity !== undefined && ack.identityApplied };
  } catch (error) {
    if (isSupervisorError(error, "AGENT_UNRESPONSIVE")) {
      throw new SupervisorError("AGENT_START_FAILED", `the guest agent did not start within ${timeoutMs} ms`, {
        cause: error,
        details: { timeoutMs, stderr: channel.stderr },
      });
    }
    if (isSupervisorError(error) && error.details.agentCode !== undefined) {
      throw new SupervisorError("AGENT_PROTOCOL", `the guest agent refused this client's hello (${error.message})`, {
        hint: "reinstall matching packages",
        cause: error,
        details: { agentCode: error.details.agentCode },
      });
    }
    throw error;
  }
}

/** Resolves with the agent's hello event; rejects on a fatal event, a protocol break, exit, timeout or abort. */
function waitForHello(channel: AgentChannel, timeoutMs: number, signal: AbortSignal | undefined) {
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
          const protocol = event.data.protocol;
          if (protocol !== PROTOCOL_VERSION) {
            reject(
              new SupervisorError(
                "AGENT_PROTOCOL",
                `the guest agent speaks protocol ${String(protocol)}, this client ${PROTOCOL_VERSION}`,
                { hint: "reinstall matching packages", details: { protocol } },
              ),
            );
            return;
          }
          try {
            resolve(parseHello(event.data));
          } catch (error) {
            if (!(error instanceof BadReply)) throw error;
            reject(new SupervisorError("AGENT_PROTOCOL", `the guest agent's hello is malformed: ${error.message}`));
          }
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
    cleanups.push(
      channel.onClosed((reason) => {
        done();
        reject(
          isSupervisorError(reason, "AGENT_PROTOCOL")
            ? reason
            : new SupervisorError("AGENT_START_FAILED", `the guest agent exited before it started; ${tail(channel)}`, {
                details: { exitCode: channel.exitStatus?.exitCode, stderr: channel.stderr },
              }),
        );
      }),
    );
  });
}

function tail(channel: AgentChannel): string {
  const text = channel.stderr.trim();
  return text ? `its last output: ${text.slice(-500)}` : "it wrote nothing to stderr";
}
