// A preview page, written by a possibly hostile guest, cannot read or overwrite the cookies of the
// host's other localhost apps or of another instance: each instance's previews have a browser
// origin of their own (a loopback address per instance). Two real instances, a host app on
// 127.0.0.1, and Debian's headless Chromium driven by playwright-core (which downloads nothing).
import http from "node:http";
import type { AddressInfo } from "node:net";
import { chromium, type Browser, type Page } from "playwright-core";
import { makeSandbox, teardown, type LooseResult, type Sandbox } from "@pi-sandbox/controller/testing";
import { chromiumPath } from "./support.js";

// The guest service: `/set?name=N&value=V` sets a cookie; every page shows the Cookie header the
// server received, so the test sees what the browser sent as well as what a script can read.
const YAML = `profile: tiny
diskGiB: 4
setup:
  - |
    cat > /workspace/cookies.py <<'PY'
    import html, http.server, os, urllib.parse
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            body = ("<!doctype html><title>cookies</title><pre id=seen>"
                    + html.escape(self.headers.get("Cookie", "")) + "</pre>").encode()
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
    command: python3 /workspace/cookies.py
    health: /
    preview: true
`;

/** The host's own localhost app (a Jupyter or Grafana stand-in), with the same two pages as the guest's. */
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
async function visit(page: Page, url: string): Promise<{ sent: string; script: string }> {
  const response = await page.goto(url, { timeout: 60_000 });
  expect(response?.status()).toBe(200);
  return { sent: (await page.textContent("#seen")) ?? "", script: String(await page.evaluate("document.cookie")) };
}

let sandbox: Sandbox;
let host: http.Server;
let browser: Browser | undefined;

beforeAll(async () => {
  sandbox = await makeSandbox("psk-");
  await sandbox.writeConfig(YAML);
  host = hostApp();
  await new Promise<void>((resolve) => host.listen(0, "127.0.0.1", resolve));
});

afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => host?.close(resolve));
  expect(await teardown(sandbox)).toEqual([]);
}, 300_000);

test("a preview page receives none of the host app's or another instance's cookies, and cannot overwrite them", async () => {
  const hostUrl = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
  const [a, b] = (await Promise.all([
    sandbox.call({ action: "create", name: "site-a", config: "sandbox.yaml" }),
    sandbox.call({ action: "create", name: "site-b", config: "sandbox.yaml" }),
  ])) as LooseResult[];
  const urlA = new URL(a!.previews[0].url as string).origin;
  const urlB = new URL(b!.previews[0].url as string).origin;
  expect(urlA).not.toBe(urlB);

  browser = await chromium.launch({ executablePath: await chromiumPath(), args: ["--no-sandbox"] });
  const page = await (await browser.newContext()).newPage();

  // The user's own localhost app and instance B each hold a session cookie.
  await visit(page, `${hostUrl}/set`);
  await visit(page, `${urlB}/set?name=b_session&value=b-secret`);
  expect((await visit(page, `${hostUrl}/`)).sent).toBe("host_session=host-secret");
  expect((await visit(page, `${urlB}/`)).sent).toBe("b_session=b-secret");

  // Instance A's page: nothing of theirs reaches its server or its scripts.
  const seenByA = await visit(page, `${urlA}/set?name=a_session&value=a-own`);
  expect(seenByA).toEqual({ sent: "", script: "a_session=a-own" });

  // A's script tries to overwrite both sessions, also naming the host explicitly.
  // (Run in the page: this file is compiled without the DOM library.)
  await page.evaluate(`
    document.cookie = "host_session=forged-by-a; Path=/";
    document.cookie = "b_session=forged-by-a; Path=/";
    document.cookie = "host_session=forged-by-a; Path=/; Domain=127.0.0.1";
  `);
  // Those writes landed in A's own jar (the Domain=127.0.0.1 one nowhere), next to A's own cookie.
  const jarA = (await visit(page, `${urlA}/`)).sent.split("; ").sort();
  expect(jarA).toEqual(["a_session=a-own", "b_session=forged-by-a", "host_session=forged-by-a"]);

  // The host app and instance B still get exactly their own cookies back.
  expect(await visit(page, `${hostUrl}/`)).toEqual({
    sent: "host_session=host-secret",
    script: "host_session=host-secret",
  });
  expect(await visit(page, `${urlB}/`)).toEqual({ sent: "b_session=b-secret", script: "b_session=b-secret" });
}, 600_000);
