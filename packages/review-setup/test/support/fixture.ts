// A small monorepo in a temp git repository, the shape of this one in miniature: a lockfile, an npm
// workspace the root depends on, and a build that builds the workspace first and then uses it. No
// registry dependencies, so `npm ci` needs no network and each refresh takes seconds, not the
// minutes this repository's refresh takes (monorepo.vm.test.ts runs that once).
import { execFileSync } from "node:child_process";
import { cp, mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

/** The fixture's one workspace: its package name and directory. */
export const FIXTURE_WORKSPACE = { name: "@review-fixture/lister", dir: "packages/lister" };

/** The lockfile of the fixture, as npm 11 writes it for the workspace; a test breaks it on purpose. */
export const FIXTURE_LOCK = JSON.stringify(
  {
    name: "review-fixture",
    version: "1.0.0",
    lockfileVersion: 3,
    requires: true,
    packages: {
      "": { name: "review-fixture", version: "1.0.0", workspaces: ["packages/*"] },
      [`node_modules/${FIXTURE_WORKSPACE.name}`]: { resolved: FIXTURE_WORKSPACE.dir, link: true },
      [FIXTURE_WORKSPACE.dir]: { name: FIXTURE_WORKSPACE.name, version: "1.0.0" },
    },
  },
  null,
  2,
);

/** The lockfile of a package with no dependencies and no workspaces. */
export const NO_DEPENDENCIES_LOCK = JSON.stringify(
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

// The workspace's source and its build (src/index.js to dist/index.js): the root's build can only
// load it through node_modules once the install linked the workspace and its build ran.
const LISTER_JS = `const fs = require("fs");
exports.list = (dir) =>
  fs.readdirSync(dir).sort().map((f) => f + ": " + fs.readFileSync(dir + "/" + f, "utf8").trim());
`;
const LISTER_BUILD_JS = `const fs = require("fs");
fs.mkdirSync("dist", { recursive: true });
fs.writeFileSync("dist/index.js", "// built\\n" + fs.readFileSync("src/index.js", "utf8"));
`;

// build.js (after the workspace's build): dist/out.txt lists src files with their contents,
// proving what was unpacked, installed and built.
const BUILD_JS = `const fs = require("fs");
const { list } = require("${FIXTURE_WORKSPACE.name}");
fs.mkdirSync("dist", { recursive: true });
fs.writeFileSync("dist/out.txt", list("src").join("\\n") + "\\n");
`;

// launch.js stands in for Pi: plain launch prints where it runs; with --mode json it does what the
// live check needs: one chat request to $FAKE_URL with the key of the provider's auth.json entry
// (the placeholder: the VM puts the real credential in on the host).
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
fetch(process.env.FAKE_URL + "/v1/chat/completions", {
  method: "POST",
  headers: { "content-type": "application/json", authorization: "Bearer " + auth.key },
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

function git(repo: string, ...args: string[]): string {
  return execFileSync("git", args, { cwd: repo, encoding: "utf8" });
}

/** Creates the fixture repository with one commit; returns its path. */
export async function makeFixtureRepo(): Promise<string> {
  const repo = await mkdtemp(join(tmpdir(), "review-fixture-"));
  const lister = join(repo, FIXTURE_WORKSPACE.dir);
  await mkdir(join(repo, "src"));
  await mkdir(join(lister, "src"), { recursive: true });
  const root = {
    name: "review-fixture",
    version: "1.0.0",
    private: true,
    workspaces: ["packages/*"],
    scripts: { build: "npm run build --workspaces && node build.js" },
  };
  await writeFile(join(repo, "package.json"), JSON.stringify(root, null, 2));
  const workspace = {
    name: FIXTURE_WORKSPACE.name,
    version: "1.0.0",
    private: true,
    main: "dist/index.js",
    scripts: { build: "node build.js" },
  };
  await writeFile(join(lister, "package.json"), JSON.stringify(workspace, null, 2));
  await writeFile(join(lister, "build.js"), LISTER_BUILD_JS);
  await writeFile(join(lister, "src", "index.js"), LISTER_JS);
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

/** A git checkout with no dependencies whose `pi/` holds Pi's bundle (package.json, dist/bundle) and jiti. */
export async function makePiRepo(): Promise<string> {
  const require = createRequire(import.meta.url);
  const piDist = dirname(require.resolve("@earendil-works/pi-coding-agent")); // …/dist
  const jiti = dirname(dirname(require.resolve("jiti"))); // …/node_modules/jiti
  const root = await mkdtemp(join(tmpdir(), "review-pi-fixture-"));
  await mkdir(join(root, "pi", "dist"), { recursive: true });
  await cp(join(dirname(piDist), "package.json"), join(root, "pi", "package.json"));
  await cp(join(piDist, "bundle"), join(root, "pi", "dist", "bundle"), { recursive: true });
  await cp(jiti, join(root, "pi", "node_modules", "jiti"), { recursive: true });
  const manifest = { name: "review-fixture", version: "1.0.0", private: true, scripts: { build: "node -e 0" } };
  await writeFile(join(root, "package.json"), JSON.stringify(manifest, null, 2));
  await writeFile(join(root, "package-lock.json"), NO_DEPENDENCIES_LOCK);
  const git = (...args: string[]) => execFileSync("git", args, { cwd: root, stdio: "ignore" });
  git("init", "-q", "-b", "main");
  git("add", ".");
  git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "fixture");
  return root;
}

/**
 * A guest shell command printing the registry requests in npm's debug logs under /root/.npm:
 * each request has an "http fetch" line, and one answered from the guest's cache ends
 * "(cache hit)" or, unrevalidated, "(cache stale)".
 */
export const NPM_REGISTRY_REQUESTS =
  "cat /root/.npm/_logs/*-debug-*.log | grep 'http fetch' | grep -vE '[(]cache (hit|stale)[)]$'";
