// What the controller's benchmarks share: the test image, result rows and their table, a process's
// resident memory, and the dashboard's RSS while a page follows its live updates.
import { appendFileSync, readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { callAction } from "../dist/client/index.js";

/** The guest image: PI_SANDBOX_TEST_IMAGE, or the repository's test image (built when missing). */
export function benchImage() {
  return (
    process.env.PI_SANDBOX_TEST_IMAGE ??
    execFileSync("npm", ["run", "-s", "test-image"], {
      cwd: fileURLToPath(new URL("../../..", import.meta.url)),
      encoding: "utf8",
    })
      .trim()
      .split("\n")
      .at(-1)
  );
}

export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The median of `n` timed runs of `fn`, in ms. */
export async function time(n, fn) {
  const samples = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    samples.push(performance.now() - t);
  }
  return median(samples);
}

const rows = [];

/**
 * Polls `url` until it answers 200 with `body`; resolves when it does (the whole tiny page, so its
 * first byte too). Each request may take `requestTimeoutMs` (a parked instance's first request
 * waits for its wake); the poll gives up after `deadlineMs`.
 */
export async function firstByte(url, body, { deadlineMs = 180_000, requestTimeoutMs = 5_000, pollMs = 50 } = {}) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(requestTimeoutMs) });
      if (res.status === 200 && (await res.text()) === body) return;
    } catch {
      // not serving yet
    }
    if (Date.now() > deadline) throw new Error(`${url} never served ${JSON.stringify(body)}`);
    await sleep(pollMs);
  }
}

/**
 * A tiny instance's sandbox.yaml on `image` whose previewed `web` service (Python's http.server)
 * serves `page` and a newline at /.
 */
export function webYaml(image, page) {
  return (
    `version: 1\nprofile: tiny\ndiskGiB: 4\nimage: ${image}\nsetup:\n  - printf '${page}\\n' > /workspace/index.html\n` +
    "services:\n  web:\n    command: python3 -m http.server $PORT --bind 127.0.0.1\n    health: /\n    preview: true\n"
  );
}

/** Records one measurement; `ratio` is ours / baseline when there is a baseline. */
export function row(name, ours, baseline, unit, target, note = "") {
  rows.push({
    package: "controller",
    name,
    ours,
    baseline,
    ratio: baseline ? ours / baseline : undefined,
    unit,
    target,
    note,
  });
}

/** Prints the rows as a Markdown table and, when PI_SANDBOX_BENCH_OUT is set, appends them as JSON lines. */
export function printRows() {
  console.log("| measurement | ours | baseline | ratio | target | note |");
  console.log("|---|---|---|---|---|---|");
  for (const r of rows) {
    const f = (x) => (x === undefined ? "" : `${x.toFixed(x < 10 ? 2 : 1)} ${r.unit}`);
    console.log(
      `| ${r.name} | ${f(r.ours)} | ${f(r.baseline)} | ${r.ratio?.toFixed(2) ?? ""} | ${r.target ?? ""} | ${r.note} |`,
    );
  }
  if (process.env.PI_SANDBOX_BENCH_OUT)
    for (const r of rows) appendFileSync(process.env.PI_SANDBOX_BENCH_OUT, JSON.stringify(r) + "\n");
}

/**
 * From an instance's controller log: for each boot that started the guest agent afresh (a create or
 * a start after stop, not a warm start, which attaches to the running agent), the ms from "guest
 * ready" to "agent … up", in log order.
 */
export function agentUpDelays(logFile) {
  const delays = [];
  let ready;
  for (const line of readFileSync(logFile, "utf8").split("\n")) {
    const at = Date.parse(line.slice(0, line.indexOf(" ")));
    if (/\] guest ready in /.test(line)) ready = at;
    else if (ready !== undefined && /\] agent \S+ up \(/.test(line)) {
      delays.push(at - ready);
      ready = undefined;
    }
  }
  return delays;
}

/** Resident memory of `pid` in MiB (/proc). */
export const rssOf = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]) / 1024;

/** The dashboard's RSS in MiB after a page followed its live updates for 20 s (it polls every 2 s then). */
export async function dashboardRss(env) {
  const dashboard = await callAction({ action: "dashboard" }, { env });
  const login = await fetch(dashboard.url, { redirect: "manual" });
  const cookie = login.headers.get("set-cookie").split(";")[0];
  const stream = new AbortController();
  const events = await fetch(new URL("/api/events", dashboard.url), { headers: { cookie }, signal: stream.signal });
  const reader = events.body.getReader();
  const until = Date.now() + 20_000;
  while (Date.now() < until) await Promise.race([reader.read().catch(() => undefined), sleep(1_000)]);
  stream.abort();
  const rss = rssOf(dashboard.pid);
  await callAction({ action: "dashboard", stop: true }, { env });
  return rss;
}
