// The local dashboard as a user meets it in a real browser (Debian's headless Chromium through
// playwright-core, which downloads nothing): two real instances, one running and one stopped, its
// preview link, a guest log line arriving live, Stop from the page, and its refusals: no token,
// a foreign Origin, and a guest's preview page trying to act on it or open a WebSocket to it.
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium, type Browser, type Page } from "playwright-core";
import { makeSandbox, teardown, type LooseResult, type Sandbox } from "@pi-sandbox/controller/testing";
import { chromiumPath } from "./support.js";

const CLI = fileURLToPath(new URL("../../packages/controller/dist/cli/main.js", import.meta.url));
/** Where the README's screenshot lives; the test rewrites it when UPDATE_SCREENSHOTS=1. */
const SCREENSHOT = fileURLToPath(new URL("../../docs/dashboard.png", import.meta.url));

// The guest's web service: `/mark?id=X` prints a log line (with an escape sequence in it);
// `/attack?port=P` is a hostile page that tries to drive the dashboard on 127.0.0.1:P.
const YAML = `profile: tiny
diskGiB: 4
setup:
  - |
    cat > /workspace/web.py <<'PY'
    import http.server, os, sys, urllib.parse
    ATTACK = """<!doctype html><title>attack</title><script>
    const port = new URLSearchParams(location.search).get("port");
    const base = "http://127.0.0.1:" + port;
    const results = {};
    const body = JSON.stringify({ op: "stop", name: "web" });
    const simple = fetch(base + "/api/action", { method: "POST", mode: "no-cors", credentials: "include",
      headers: { "content-type": "text/plain" }, body }).then(() => "sent", (e) => "failed");
    const cors = fetch(base + "/api/action", { method: "POST", credentials: "include",
      headers: { "content-type": "application/json" }, body }).then((r) => "status " + r.status, () => "blocked");
    const socket = new Promise((resolve) => {
      const ws = new WebSocket("ws://127.0.0.1:" + port + "/");
      ws.onopen = () => resolve("open");
      ws.onerror = () => resolve("refused");
    });
    Promise.all([simple, cors, socket]).then(([s, c, w]) => {
      window.results = { simple: s, cors: c, socket: w };
      document.title = "done";
    });
    </script>"""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/mark":
                print("dash-mark " + query.get("id", "") + " \\x1b[31mred", flush=True)
            body = (ATTACK if url.path == "/attack" else "<!doctype html><title>docs</title><p>the docs").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
    PY
services:
  web:
    command: python3 /workspace/web.py
    health: /
    preview:
      title: "<img src=x onerror=window.pwned=1><b>Docs</b>"
      description: "first line\\nsecond\\tline"
`;

let sandbox: Sandbox;
let browser: Browser | undefined;
let page: Page;
let dashboardUrl: string;
let origin: string;
let previewUrl: string;

/** Runs the real CLI in the sandbox and parses its --json output. */
async function cliJson(...args: string[]): Promise<LooseResult> {
  const { stdout } = await promisify(execFile)(process.execPath, [CLI, ...args, "--json"], {
    cwd: sandbox.dir,
    env: sandbox.env,
  });
  return JSON.parse(stdout) as LooseResult;
}

/** The status of a GET of `url` sent with this Host header. */
function statusWithHost(url: string, host: string, cookie: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { headers: { host, cookie } }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    request.on("error", reject);
  });
}

/**
 * Waits until the element `selector` names holds `text`. The predicate is a function, not a string:
 * the page's Content-Security-Policy forbids eval, which string predicates need.
 */
async function waitForText(selector: string, text: string, timeout = 30_000): Promise<void> {
  type Doc = { querySelector(s: string): { textContent: string | null } | null };
  await page.waitForFunction(
    ([sel, want]) =>
      ((globalThis as unknown as { document: Doc }).document.querySelector(sel!)?.textContent ?? "").includes(want!),
    [selector, text],
    { timeout },
  );
}

/** The state the page shows for an instance. */
const shownState = (name: string) => page.textContent(`#instances tr[data-name="${name}"] .state`);

beforeAll(async () => {
  sandbox = await makeSandbox("psd-");
  await sandbox.writeConfig(YAML);
  await sandbox.writeConfig("profile: tiny\ndiskGiB: 4\n", "idle.yaml");
  // One boot at a time: two TCG boots side by side on a busy 2-core host can miss the agent's
  // 60 s start deadline.
  await sandbox.call({ action: "create", name: "idle", config: "idle.yaml" });
  await sandbox.call({ action: "stop", name: "idle" });
  const web = await sandbox.call({ action: "create", name: "web", config: "sandbox.yaml" });
  previewUrl = web.previews[0].url as string;
  const dashboard = await cliJson("dashboard");
  dashboardUrl = dashboard.url as string;
  origin = new URL(dashboardUrl).origin;
  browser = await chromium.launch({ executablePath: await chromiumPath(), args: ["--no-sandbox"] });
  page = await (await browser.newContext({ viewport: { width: 1200, height: 760 } })).newPage();
}, 600_000);

afterAll(async () => {
  await browser?.close();
  if (sandbox) await cliJson("dashboard", "--stop").catch(() => undefined);
  expect(await teardown(sandbox)).toEqual([]);
}, 300_000);

test("without the link's token, from another Host or posted from a foreign Origin, the dashboard answers 403", async () => {
  expect((await fetch(`${origin}/`)).status).toBe(403);
  expect((await fetch(`${origin}/api/state`)).status).toBe(403);
  const login = await fetch(dashboardUrl, { redirect: "manual" });
  expect(login.status).toBe(303);
  const cookie = login.headers.get("set-cookie")!.split(";")[0]!;
  expect(login.headers.get("set-cookie")).toMatch(/HttpOnly; SameSite=Strict/);
  expect((await fetch(`${origin}/api/state`, { headers: { cookie } })).status).toBe(200);
  const post = (headers: Record<string, string>) =>
    fetch(`${origin}/api/action`, {
      method: "POST",
      headers: { cookie, "content-type": "application/json", ...headers },
      body: JSON.stringify({ op: "stop", name: "web" }),
    });
  expect((await post({ origin: "http://127.0.0.2:8000" })).status).toBe(403);
  expect((await post({})).status).toBe(403);
  // fetch() sets Host itself; a DNS-rebinding page's request carries the attacker's name.
  expect(await statusWithHost(`${origin}/api/state`, "attacker.example", cookie)).toBe(403);
  expect(await statusWithHost(`${origin}/api/state`, new URL(origin).host, cookie)).toBe(200);
  expect((await sandbox.call({ action: "inspect", name: "web" })).state).toBe("running");
});

test("the page lists the running and the stopped instance, with the preview's guest-written title as text and a working link", async () => {
  await page.goto(dashboardUrl);
  expect(new URL(page.url()).search).toBe("");
  await page.waitForSelector('#instances tr[data-name="idle"]');
  expect(await shownState("web")).toBe("running");
  expect(await shownState("idle")).toBe("stopped");
  const link = page.locator('#instances tr[data-name="web"] .previews a');
  expect(await link.textContent()).toBe("<img src=x onerror=window.pwned=1><b>Docs</b>");
  expect(await page.locator("#instances .previews img, #instances .previews b").count()).toBe(0);
  expect(await page.textContent('#instances tr[data-name="web"] .previews .description')).toBe(
    "first line\\nsecond\\tline",
  );
  expect(await page.evaluate("window.pwned")).toBeUndefined();
  expect(await link.getAttribute("href")).toBe(previewUrl);
  const preview = await (await browser!.newContext()).newPage();
  expect((await preview.goto(previewUrl))?.status()).toBe(200);
  expect(await preview.textContent("p")).toBe("the docs");
  await preview.close();
  // The running instance's cost: CPU and memory, each with its sparkline.
  await waitForText('#instances tr[data-name="web"] .cpu', "%");
  expect(await page.textContent('#instances tr[data-name="web"] .rss')).toMatch(/MiB/);
});

test("a log line the guest writes appears on the page within 2 s, its escape sequence shown as text", async () => {
  await page.click('button[data-key="detail:web"]');
  await page.waitForSelector('#log-select option[value="web"]', { state: "attached" });
  await page.selectOption("#log-select", "web");
  const id = `m${Date.now()}`;
  // The log's tail comes first; the new line must arrive after the follow has begun.
  await page.waitForTimeout(1500);
  expect((await fetch(`${previewUrl}mark?id=${id}`)).status).toBe(200);
  const written = Date.now();
  await waitForText("#log", id, 2_000);
  const shownAfterMs = Date.now() - written;
  expect(shownAfterMs).toBeLessThanOrEqual(2_000);
  expect(await page.textContent("#log")).toContain(`dash-mark ${id} \\x1b[31mred`);
});

test("a guest's preview page can neither act through the dashboard nor open a WebSocket to it", async () => {
  const port = new URL(origin).port;
  // Opened in the browser that holds the dashboard's session, as a user clicking the preview link would.
  const attack = await page.context().newPage();
  await attack.goto(`${previewUrl}attack?port=${port}`);
  await attack.waitForFunction(
    () => (globalThis as unknown as { document: { title: string } }).document.title === "done",
    undefined,
    { timeout: 60_000 },
  );
  const results = (await attack.evaluate("window.results")) as Record<string, string>;
  expect(results.socket).toBe("refused");
  expect(results.cors).toBe("blocked");
  await attack.close();
  expect((await sandbox.call({ action: "inspect", name: "web" })).state).toBe("running");
  const log = await readFile(path.join(sandbox.home, "logs", "dashboard.log"), "utf8");
  expect(log).toMatch(/refused POST \/api\/action: Origin "http:\/\/127\.[0-9.]+:[0-9]+" is not this dashboard's/);
  expect(log).toMatch(/refused an upgrade/);
});

test("Stop on the page stops the instance, as the CLI then reports", async () => {
  if (process.env.UPDATE_SCREENSHOTS === "1") {
    await page.evaluate(() => (globalThis as unknown as { scrollTo(x: number, y: number): void }).scrollTo(0, 0));
    await page.screenshot({ path: SCREENSHOT });
  }
  await page.click('button[data-key="stop:web"]');
  const deadline = Date.now() + 300_000;
  let state = "";
  while (Date.now() < deadline && state !== "stopped") {
    state = (await cliJson("inspect", "web")).state as string;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  expect(state).toBe("stopped");
  await waitForText('#instances tr[data-name="web"] .state', "stopped", 30_000);
  expect(await page.locator("#errors .error").count()).toBe(0);
}, 600_000);
