// A tiny npm project in a temp git repository: no dependencies, so `npm ci` needs no network.
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The lockfile of the fixture; a test breaks it on purpose. */
export const FIXTURE_LOCK = JSON.stringify(
  {
    name: "review-fixture",
    version: "1.0.0",
    lockfileVersion: 3,
    requires: true,
    packages: { "": { name: "review-fixture", version: "1.0.0" } },
  },
  null,
  2,
);

// build.js: dist/out.txt lists src files with their contents, proving what was unpacked and built.
const BUILD_JS = `const fs = require("fs");
fs.mkdirSync("dist", { recursive: true });
const lines = fs.readdirSync("src").sort().map((f) => f + ": " + fs.readFileSync("src/" + f, "utf8").trim());
fs.writeFileSync("dist/out.txt", lines.join("\\n") + "\\n");
`;

// launch.js stands in for Pi: plain launch prints where it runs; with --mode json it does what the
// live check needs (one chat request with the stored token) against a fake OpenAI-style server.
const LAUNCH_JS = `const fs = require("fs");
const args = process.argv.slice(2);
const agent = process.env.PI_CODING_AGENT_DIR;
if (!args.includes("--mode")) {
  console.log("launched cwd=" + fs.realpathSync(process.cwd()) + " agent=" + agent + " node=" + process.version + " args=" + args.join(","));
  process.exit(0);
}
const model = args[args.indexOf("--model") + 1];
const [provider, id] = [model.slice(0, model.indexOf("/")), model.slice(model.indexOf("/") + 1)];
const auth = JSON.parse(fs.readFileSync(agent + "/auth.json", "utf8"))[provider];
fetch("http://127.0.0.1:18080/v1/chat/completions", {
  method: "POST",
  headers: { "content-type": "application/json", authorization: "Bearer " + auth.access },
  body: JSON.stringify({ model: id, messages: [{ role: "user", content: args[args.length - 1] }] }),
}).then(async (res) => {
  const body = await res.json();
  if (!res.ok) { console.error("provider said", res.status, JSON.stringify(body)); process.exit(1); }
  const u = body.usage;
  console.log(JSON.stringify({ type: "message_end", message: { role: "assistant", stopReason: "stop",
    content: [{ type: "text", text: body.choices[0].message.content }],
    usage: { input: u.prompt_tokens, output: u.completion_tokens, totalTokens: u.total_tokens } } }));
});
`;

/** Guest-side fake provider: answers with the sha256 prefix of the bearer token it received. */
export const FAKE_PROVIDER_PY = `import hashlib, json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        token = self.headers.get("authorization", "")[len("Bearer "):]
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ready " + hashlib.sha256(token.encode()).hexdigest()[:12]}}],
                           "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}}).encode()
        self.send_response(200 if token else 401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`;

function git(repo: string, ...args: string[]): string {
  return execFileSync("git", args, { cwd: repo, encoding: "utf8" });
}

/** Creates the fixture repository with one commit; returns its path. */
export async function makeFixtureRepo(): Promise<string> {
  const repo = await mkdtemp(join(tmpdir(), "review-fixture-"));
  await mkdir(join(repo, "src"));
  await writeFile(
    join(repo, "package.json"),
    JSON.stringify(
      { name: "review-fixture", version: "1.0.0", private: true, scripts: { build: "node build.js" } },
      null,
      2,
    ),
  );
  await writeFile(join(repo, "package-lock.json"), FIXTURE_LOCK);
  await writeFile(join(repo, "build.js"), BUILD_JS);
  await writeFile(join(repo, "launch.js"), LAUNCH_JS);
  await writeFile(join(repo, "src", "a.txt"), "alpha\n");
  await writeFile(join(repo, "src", "b.txt"), "bravo\n");
  await writeFile(join(repo, ".gitignore"), "node_modules\ndist\n");
  git(repo, "init", "-q", "-b", "main");
  git(repo, "add", ".");
  git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "fixture");
  return repo;
}

/**
 * Guest-side fake OpenAI-compatible chat server (streaming, as Pi's openai-completions API asks):
 * the first request gets a call of the `sandbox` tool with `help`, every later one the text
 * "FINAL: " plus the start of the last tool result. Run with `node fake_openai.js <port>`.
 */
export const FAKE_OPENAI_JS = `const http = require("http");
let n = 0;
http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    n += 1;
    const request = JSON.parse(body || "{}");
    const tool = (request.messages || []).filter((m) => m.role === "tool").pop();
    const text = tool && (typeof tool.content === "string" ? tool.content : (tool.content || []).map((p) => p.text || "").join(""));
    const chunk = (delta, finish) => res.write("data: " + JSON.stringify({ id: "fake-" + n, object: "chat.completion.chunk",
      created: 0, model: request.model, choices: [{ index: 0, delta, finish_reason: finish }] }) + "\\n\\n");
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (!tool) {
      chunk({ role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_1", type: "function",
        function: { name: "sandbox", arguments: JSON.stringify({ input: "help" }) } }] }, null);
      chunk({}, "tool_calls");
    } else {
      chunk({ role: "assistant", content: "FINAL: " + String(text).replace(/\\s+/g, " ").slice(0, 60) }, null);
      chunk({}, "stop");
    }
    res.write("data: " + JSON.stringify({ id: "fake-" + n, object: "chat.completion.chunk", created: 0, model: request.model,
      choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }) + "\\n\\n");
    res.end("data: [DONE]\\n\\n");
  });
}).listen(Number(process.argv[2]), "127.0.0.1");
`;
