// The local dashboard and previews as a user meets them in a real browser (Debian's headless
// Chromium through playwright-core, which downloads nothing): two real instances, one running and
// one stopped, its preview link, a guest log line arriving live, Stop from the page, and its
// refusals: no token, a link opened a second time, a foreign Origin, and a guest's preview page
// trying to act on it or open a WebSocket to it. With the stopped one started, a preview page
// (each instance's previews have a loopback address of their own) cannot read or overwrite the
// cookies of a host app on 127.0.0.1 or of the other instance. A kept checkpoint and a fork show
// in their instance's group, the fork also under its source in the list (with its diff stat when
// the controller has `diff`). The instance's ledger shows as a live timeline, as text.
// A guest request to a host off allowedHosts waits on the page until Allow once lets it out.
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium, type Browser, type Page } from "playwright-core";
import { makeSandbox, teardown, type LooseResult, type Sandbox } from "@pi-sandbox/controller/testing";
import { chromiumPath } from "./support/vm-suite.js";

const CLI = fileURLToPath(new URL("../../packages/controller/dist/cli/main.js", import.meta.url));
/** Where the README's screenshot lives; the test rewrites it when UPDATE_SCREENSHOTS=1. */
const SCREENSHOT = fileURLToPath(new URL("../../docs/dashboard.png", import.meta.url));

// The guest's web service: `/mark?id=X` prints a log line (with an escape sequence in it);
// `/attack?port=P` is a hostile page that tries to drive the dashboard on 127.0.0.1:P;
// `/set?name=N&value=V` sets a cookie. Every other page shows the Cookie header the server
// received, so the test sees what the browser sent as well as what a script can read.
const YAML = `profile: tiny
diskGiB: 4
setup:
  - |
    cat > /workspace/web.py <<'PY'
    import html, http.server, os, sys, urllib.parse
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
            seen = "<pre id=seen>" + html.escape(self.headers.get("Cookie", "")) + "</pre>"
            body = (ATTACK if url.path == "/attack" else "<!doctype html><title>docs</title><p>the docs</p>" + seen).encode()
            self.send_response(200)
            if url.path == "/set":
                self.send_header("Set-Cookie", query["name"] + "=" + query["value"] + "; Path=/")
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
let hostServer: http.Server | undefined;

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

/** The host's own localhost app (a Jupyter or Grafana stand-in), with the same cookie pages as the guest's. */
function hostApp(): http.Server {
  return http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://host.invalid");
    if (url.pathname === "/set") res.setHeader("set-cookie", `host_session=host-secret; Path=/`);
    res.setHeader("content-type", "text/html");
    const seen = (req.headers.cookie ?? "").replace(/[<&]/g, "");
    res.end(`<!doctype html><title>host app</title><pre id=seen>${seen}</pre>`);
  });
}

/** Opens `url` and returns the Cookie header its server received and what `document.cookie` reads. */
async function visit(tab: Page, url: string): Promise<{ sent: string; script: string }> {
  const response = await tab.goto(url, { timeout: 60_000 });
  expect(response?.status()).toBe(200);
  return { sent: (await tab.textContent("#seen")) ?? "", script: String(await tab.evaluate("document.cookie")) };
}

/** The state the page shows for an instance. */
const shownState = (name: string) => page.textContent(`#instances tr[data-name="${name}"] .state`);

beforeAll(async () => {
  sandbox = await makeSandbox("psd-");
  await sandbox.writeConfig(YAML);
  // One boot at a time: two TCG boots side by side on a busy 2-core host can miss the agent's
  // 60 s start deadline. Both serve the same page: the cookie test needs two instances' previews.
  await sandbox.call({ action: "create", name: "idle", config: "sandbox.yaml" });
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
  await new Promise((resolve) => hostServer?.close(resolve));
  if (sandbox) await cliJson("dashboard", "--stop").catch(() => undefined);
  expect(await teardown(sandbox)).toEqual([]);
}, 300_000);

test("without the link's token, with a link used before, from another Host or posted from a foreign Origin, the dashboard answers 403", async () => {
  expect((await fetch(`${origin}/`)).status).toBe(403);
  expect((await fetch(`${origin}/api/state`)).status).toBe(403);
  // A link of its own: each link opens one session, and the browser test opens dashboardUrl.
  const link = (await cliJson("dashboard")).url as string;
  const login = await fetch(link, { redirect: "manual" });
  expect(login.status).toBe(303);
  expect((await fetch(link, { redirect: "manual" })).status).toBe(403);
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

test("the link opens the page once (a reload keeps it, the link again in another tab is refused); it lists the running and the stopped instance, with the preview's guest-written title as text and a working link", async () => {
  await page.goto(dashboardUrl);
  expect(new URL(page.url()).search).toBe("");
  // A reload asks for the token-free address with the session cookie: the link is not used again.
  expect((await page.reload())?.status()).toBe(200);
  await page.waitForSelector('#instances tr[data-name="idle"]');
  // The same link opened again, in another tab of this browser, is refused and says what to run.
  const again = await page.context().newPage();
  expect((await again.goto(dashboardUrl))?.status()).toBe(403);
  expect(await again.textContent("body")).toMatch(/this link was already used[^]*pi-sandbox dashboard/);
  await again.close();
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

test("the instance's ledger shows as a timeline, newest first: a new exec appears live, its markup as text, and the kind filter narrows it", async () => {
  // web's details are open (the test before): its ledger follows below its log.
  await waitForText("#timeline", "create by library: ok");
  const cmd = `echo '<img src=x onerror=window.pwned=2>' ${Date.now()}`;
  await sandbox.call({ action: "exec", name: "web", cmd });
  await waitForText("#timeline", cmd, 10_000);
  const seqs = await page
    .locator("#timeline li")
    .evaluateAll((items) => items.map((item) => Number((item as unknown as { dataset: { seq: string } }).dataset.seq)));
  expect(seqs).toEqual([...seqs].sort((a, b) => b - a));
  // Its call's entry, then the exec's (command, exit code, duration, output bytes) above it.
  const withCmd = await page
    .locator("#timeline li", { hasText: cmd })
    .evaluateAll((items) => items.map((item) => (item as unknown as { dataset: { kind: string } }).dataset.kind));
  expect(withCmd).toEqual(["exec", "action"]);
  expect(await page.locator("#timeline img").count()).toBe(0);
  expect(await page.evaluate("window.pwned")).toBeUndefined();
  await page.selectOption("#timeline-kind", "exec");
  await waitForText("#timeline", cmd);
  const kinds = await page
    .locator("#timeline li")
    .evaluateAll((items) => items.map((item) => (item as unknown as { dataset: { kind: string } }).dataset.kind));
  expect(kinds.length).toBeGreaterThan(0);
  expect(new Set(kinds)).toEqual(new Set(["exec"]));
  await page.selectOption("#timeline-kind", "");
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

test("a preview page receives none of the host app's or another instance's cookies, and cannot overwrite them", async () => {
  hostServer = hostApp();
  await new Promise<void>((resolve) => hostServer!.listen(0, "127.0.0.1", resolve));
  const hostUrl = `http://127.0.0.1:${(hostServer.address() as AddressInfo).port}`;
  const other = await sandbox.call({ action: "start", name: "idle" });
  expect(other.state).toBe("running");
  const urlA = new URL(previewUrl).origin;
  const urlB = new URL(other.previews[0].url as string).origin;
  expect(urlA).not.toBe(urlB);
  // A context of its own: the dashboard's session cookie (on 127.0.0.1) stays out of it.
  const context = await browser!.newContext();
  const tab = await context.newPage();

  // The user's own localhost app and instance B each hold a session cookie.
  await visit(tab, `${hostUrl}/set`);
  await visit(tab, `${urlB}/set?name=b_session&value=b-secret`);
  expect((await visit(tab, `${hostUrl}/`)).sent).toBe("host_session=host-secret");
  expect((await visit(tab, `${urlB}/`)).sent).toBe("b_session=b-secret");

  // Instance A's page: nothing of theirs reaches its server or its scripts.
  const seenByA = await visit(tab, `${urlA}/set?name=a_session&value=a-own`);
  expect(seenByA).toEqual({ sent: "", script: "a_session=a-own" });

  // A's script tries to overwrite both sessions, also naming the host explicitly.
  // (Run in the page: this file is compiled without the DOM library.)
  await tab.evaluate(`
    document.cookie = "host_session=forged-by-a; Path=/";
    document.cookie = "b_session=forged-by-a; Path=/";
    document.cookie = "host_session=forged-by-a; Path=/; Domain=127.0.0.1";
  `);
  // Those writes landed in A's own jar (the Domain=127.0.0.1 one nowhere), next to A's own cookie.
  const jarA = (await visit(tab, `${urlA}/`)).sent.split("; ").sort();
  expect(jarA).toEqual(["a_session=a-own", "b_session=forged-by-a", "host_session=forged-by-a"]);

  // The host app and instance B still get exactly their own cookies back.
  expect(await visit(tab, `${hostUrl}/`)).toEqual({
    sent: "host_session=host-secret",
    script: "host_session=host-secret",
  });
  expect(await visit(tab, `${urlB}/`)).toEqual({ sent: "b_session=b-secret", script: "b_session=b-secret" });
  await context.close();
  // Back as the page test found it: idle stopped.
  expect((await sandbox.call({ action: "stop", name: "idle" })).state).toBe("stopped");
}, 600_000);

test("an instance's kept checkpoint and a fork show side by side in its group, the fork right under its source, guest-chosen text as text", async () => {
  // No boot of its own: a disk checkpoint of the running web (its disk waits a few ms), and a fork
  // of the stopped idle, left stopped (a copy of its disk's layers).
  const taken = await sandbox.call({ action: "checkpoint", name: "web", label: "<b>before</b> edits" });
  const id = (taken.checkpoint as { id: string }).id;
  await sandbox.call({ action: "fork", name: "idle", names: ["idle-copy"], start: false });
  const webGroup = '#instances tr[data-branches-of="web"]';
  const idleGroup = '#instances tr[data-branches-of="idle"]';
  // The page hears of both at its next poll (every 2 s while it is open).
  await page.waitForSelector(`${webGroup} tr[data-checkpoint="${id}"]`, { state: "attached", timeout: 60_000 });
  await page.waitForSelector(`${idleGroup} li[data-fork="idle-copy"]`, { state: "attached", timeout: 60_000 });
  await page.click(`${webGroup} summary`);
  await page.click(`${idleGroup} summary`);
  expect(await page.textContent(`${webGroup} summary`)).toBe("Forks and checkpoints of web: 0 forks, 1 checkpoint");
  const row = `${webGroup} tr[data-checkpoint="${id}"]`;
  expect(await page.textContent(`${row} .label`)).toBe("<b>before</b> edits");
  expect(await page.textContent(`${row} .kind`)).toBe("disk");
  expect(await page.locator("#instances tr.branches b, #instances tr.branches img").count()).toBe(0);
  expect(await page.textContent(`${idleGroup} li[data-fork="idle-copy"] .state`)).toBe("stopped");
  // In the list, the fork comes right after its source's row and group, and says whose fork it is.
  const order = await page.$$eval("#instances > tbody > tr", (rows) =>
    rows.map((r) => r.getAttribute("data-name") ?? `group:${r.getAttribute("data-branches-of")}`),
  );
  expect(order.slice(order.indexOf("idle"), order.indexOf("idle") + 3)).toEqual(["idle", "group:idle", "idle-copy"]);
  expect(await page.textContent('#instances tr[data-name="idle-copy"] .forked-from')).toBe("fork of idle");
  // The group stays open across the page's refreshes.
  await page.waitForTimeout(2_500);
  expect(await page.locator(`${webGroup} details[open]`).count()).toBe(1);

  const diffButton = page.locator(`button[data-key="diff:web|since|${id}"]`);
  if ((await diffButton.count()) > 0) {
    // The stat runs in the guest only when asked: a new file since the checkpoint.
    await sandbox.call({ action: "exec", name: "web", cmd: "echo new > /workspace/dash-new.txt" });
    // The page is rebuilt at each poll: a click whose press and release meet two builds of the
    // button is lost, so click until the page shows it asked (the button busy, or an answer).
    const asked = `${row} .diffstat button[disabled], ${row} .diffstat .stat, ${row} .diffstat .diff-error`;
    for (let i = 0; i < 10 && (await page.locator(asked).count()) === 0; i++) {
      await diffButton.click();
      await page.waitForTimeout(300);
    }
    await page.waitForSelector(`${row} .diffstat .stat, ${row} .diffstat .diff-error`, {
      state: "attached",
      timeout: 120_000,
    });
    expect(await page.textContent(`${row} .diffstat`)).toContain("added dash-new.txt +1 −0");
    expect(await page.textContent(`${row} .diffstat .stat`)).toMatch(/^[0-9]+ files?, \+[0-9]+ −[0-9]+$/);
    // A stopped fork is never woken for its stat.
    expect(await page.textContent(`${idleGroup} li[data-fork="idle-copy"] .diffstat`)).toContain(
      "diff stat while both run",
    );
  }
  expect(await page.locator("#errors .error").count()).toBe(0);
  await sandbox.call({ action: "destroy", name: "idle-copy", confirm: "idle-copy" });
  await page.waitForSelector('#instances tr[data-name="idle-copy"]', { state: "detached", timeout: 30_000 });
}, 600_000);

test("a guest request to a host off allowedHosts waits on the page; Allow once there lets it out, as egress and the ledger then say", async () => {
  // The page listens: the dashboard counts as someone who can answer for the running instance.
  await page.goto(`${origin}/`);
  await waitForText("#updated", "Updated");
  // The name never resolves (.invalid): let out, the host's lookup of it fails (Gondolin's 400); refused, its 403.
  const curl = sandbox.call({
    action: "exec",
    name: "web",
    cmd: "curl -s -o /dev/null -w '%{http_code}' --max-time 90 http://approve-me.invalid/",
    timeoutMs: 60_000,
  });
  await waitForText("#egress-asks", "web wants to reach approve-me.invalid:80 (HTTP GET)");
  await page.getByRole("button", { name: "Allow once: web to approve-me.invalid" }).click();
  expect((await curl).output).toBe("400");
  await page.waitForSelector("#egress", { state: "hidden", timeout: 30_000 });
  const view = await cliJson("egress", "web");
  expect(view.hosts).toContainEqual(
    expect.objectContaining({ host: "approve-me.invalid", allowed: 1, denied: 0, lastRule: "approved once" }),
  );
  const trust = (await cliJson("audit", "web", "--kind", "trust")).entries as LooseResult[];
  expect(trust.at(-1)!.data).toMatchObject({ answer: "approved once", by: "dashboard", couldAnswer: ["dashboard"] });
  expect(await page.locator("#errors .error").count()).toBe(0);
}, 300_000);

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
