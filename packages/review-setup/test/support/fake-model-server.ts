// A fake OpenAI-compatible model server on the host's 127.0.0.1, the shape of a local one (oMLX,
// llama-server, Ollama, LM Studio): `GET /v1/models` lists the models it serves, and
// `POST /v1/chat/completions` streams one reply, "served by <model>: <last user text>", the way
// Pi's openai-completions API expects it. Tests add models while it runs and read what it saw.
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";

/** One request the server answered. */
export interface SeenRequest {
  method: string;
  url: string;
  /** Whether it carried `Authorization: Bearer <key>` when the server wants a key. */
  keyed?: boolean;
  /** The chat request's model and messages (POST only). */
  model?: string;
  messages?: { role: string; content?: unknown }[];
}

/** A running fake server. */
export interface FakeModelServer {
  /** Its port on 127.0.0.1. */
  port: number;
  /** Ids `GET /v1/models` lists, in order; tests push to it. */
  models: string[];
  /** Every request, in order. */
  seen: SeenRequest[];
  /** When set, every request without `Authorization: Bearer <key>` gets 401 (a server with key checks). */
  key?: string;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** Text of the last user message of a chat request. */
export function lastUserText(messages: SeenRequest["messages"]): string {
  const last = (messages ?? []).filter((m) => m.role === "user").pop();
  if (!last) return "";
  if (typeof last.content === "string") return last.content;
  return ((last.content ?? []) as { text?: string }[]).map((part) => part.text ?? "").join("");
}

/** Starts the server with these models; `port` 0 picks a free one. */
export async function startFakeModelServer(models: string[], port = 0): Promise<FakeModelServer> {
  const seen: SeenRequest[] = [];
  const server = createServer((req, res) => {
    void (async () => {
      const body = await readBody(req);
      const entry: SeenRequest = { method: req.method ?? "", url: req.url ?? "" };
      seen.push(entry);
      if (state.key !== undefined) {
        entry.keyed = req.headers.authorization === `Bearer ${state.key}`;
        if (!entry.keyed) {
          res.writeHead(401, { "content-type": "application/json" });
          res.end(JSON.stringify({ error: { message: "invalid api key" } }));
          return;
        }
      }
      if (req.method === "GET" && req.url === "/v1/models") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            object: "list",
            data: state.models.map((id) => ({ id, object: "model", owned_by: "fake" })),
          }),
        );
        return;
      }
      if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
        res.writeHead(404).end();
        return;
      }
      const request = JSON.parse(body) as { model: string; messages: SeenRequest["messages"] };
      entry.model = request.model;
      entry.messages = request.messages;
      const chunk = (delta: Record<string, unknown>, finish: string | null) =>
        res.write(
          `data: ${JSON.stringify({
            id: `fake-${seen.length}`,
            object: "chat.completion.chunk",
            created: 0,
            model: request.model,
            choices: [{ index: 0, delta, finish_reason: finish }],
          })}\n\n`,
        );
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      chunk({ role: "assistant", content: `served by ${request.model}: ${lastUserText(request.messages)}` }, null);
      chunk({}, "stop");
      res.write(
        `data: ${JSON.stringify({ id: "usage", object: "chat.completion.chunk", created: 0, model: request.model, choices: [], usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 } })}\n\n`,
      );
      res.end("data: [DONE]\n\n");
    })();
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const state: FakeModelServer = {
    port: (server.address() as AddressInfo).port,
    models: [...models],
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  return state;
}
