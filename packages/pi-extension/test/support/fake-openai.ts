// A scripted OpenAI-compatible chat server on 127.0.0.1 for driving a real Pi process. Each
// request takes the next scripted reply; with none left it answers "FINAL: <last tool result>".

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** One chat message as Pi sends it. */
export interface ChatMessage {
  role: string;
  content?: unknown;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/** The parts of a chat-completions request the tests look at. */
export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  tools?: { type: string; function: { name: string; description?: string; parameters?: unknown } }[];
}

/** A scripted reply: call one tool, or say something. */
export type FakeReply = { tool: string; args: Record<string, unknown> } | { text: string };

/** A running fake server. */
export interface FakeOpenAI {
  /** Base URL for models.json (`…/v1`). */
  baseUrl: string;
  /** Every request received, in order. */
  requests: ChatRequest[];
  /** Queues replies for the next requests. */
  script(...replies: FakeReply[]): void;
  /** Stops the server. */
  close(): Promise<void>;
}

/** Text of the last tool result in a request, or undefined. */
export function lastToolResult(request: ChatRequest): string | undefined {
  const message = request.messages.findLast((m) => m.role === "tool");
  if (!message) return undefined;
  if (typeof message.content === "string") return message.content;
  if (Array.isArray(message.content)) {
    return (message.content as { type: string; text?: string }[]).map((part) => part.text ?? "").join("");
  }
  return undefined;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function chunk(res: ServerResponse, n: number, delta: Record<string, unknown>, finish: string | null): void {
  const body = {
    id: `fake-${n}`,
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model: "fake-model",
    choices: [{ index: 0, delta, finish_reason: finish }],
  };
  res.write(`data: ${JSON.stringify(body)}\n\n`);
}

/** Starts the server on an ephemeral port. */
export async function startFakeOpenAI(): Promise<FakeOpenAI> {
  const requests: ChatRequest[] = [];
  const queue: FakeReply[] = [];
  let calls = 0;
  const server = createServer((req, res) => {
    void (async () => {
      if (req.method !== "POST" || !req.url?.endsWith("/chat/completions")) {
        res.writeHead(404).end();
        return;
      }
      const request = JSON.parse(await readBody(req)) as ChatRequest;
      requests.push(request);
      const n = requests.length;
      const reply: FakeReply = queue.shift() ?? { text: `FINAL: ${lastToolResult(request) ?? "(no tool result)"}` };
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      if ("tool" in reply) {
        calls += 1;
        const call = {
          index: 0,
          id: `call_${calls}`,
          type: "function",
          function: { name: reply.tool, arguments: JSON.stringify(reply.args) },
        };
        chunk(res, n, { role: "assistant", content: null, tool_calls: [call] }, null);
        chunk(res, n, {}, "tool_calls");
      } else {
        chunk(res, n, { role: "assistant", content: reply.text }, null);
        chunk(res, n, {}, "stop");
      }
      res.end("data: [DONE]\n\n");
    })().catch((error: unknown) => {
      res.writeHead(500).end(String(error));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    script: (...replies) => queue.push(...replies),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
