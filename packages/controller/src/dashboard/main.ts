// The dashboard process: started detached by `pi-sandbox dashboard`, one per state root. It claims
// the root's dashboard.json, serves the page on 127.0.0.1, and runs until `dashboard --stop`
// (SIGTERM) or the host goes down; it outlives the CLI and Pi that started it.
import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { parseArgs } from "node:util";
import { callAction, findAction, markEgressAnswerer } from "../client/index.js";
import { createFileLogger } from "../log.js";
import { StateLayout } from "../state/layout.js";
import { claimDashboard, publishPort, releaseDashboard } from "./record.js";
import { startDashboardServer } from "./server.js";

const { values } = parseArgs({ options: { root: { type: "string" } } });
if (!values.root) {
  process.stderr.write("usage: dashboard --root <state root>\n");
  process.exit(2);
}
const layout = new StateLayout(values.root);
await layout.ensurePrivate();
await mkdir(dirname(layout.dashboardLogFile()), { recursive: true, mode: 0o700 });
const log = createFileLogger(layout.dashboardLogFile(), "[dashboard]");
const record = await claimDashboard(layout);
if (!record) {
  log.info("another dashboard serves this state root; exiting");
  process.exit(0);
}
const env = { ...process.env, PI_SANDBOX_HOME: layout.root };
try {
  const server = await startDashboardServer({
    // This machine's state root, whatever context the user's commands go to (`context use`).
    call: (input) => callAction(input, { env, cwd: layout.root, via: "dashboard", context: "local" }),
    // The other machines' lists, each through its own context (its previews forwarded here).
    callIn: (context, input) => callAction(input, { env, cwd: layout.root, via: "dashboard", context }),
    key: record.key,
    log,
    diff: findAction("diff") !== undefined,
    present: async (names) => {
      await Promise.all(names.map((name) => markEgressAnswerer(layout, name, "dashboard", String(process.pid))));
    },
  });
  await publishPort(layout, record, server.port);
  log.info(`serving http://127.0.0.1:${server.port}/ (pid ${process.pid})`);
  const stop = (signal: string) => {
    log.info(`${signal}: stopping`);
    // Whatever hangs (a page's stream, a slow action), the process ends within 5 s.
    setTimeout(() => process.exit(0), 5_000).unref();
    void server
      .close()
      .then(() => releaseDashboard(layout, record))
      .finally(() => process.exit(0));
  };
  process.once("SIGTERM", () => stop("SIGTERM"));
  process.once("SIGINT", () => stop("SIGINT"));
} catch (error) {
  log.warn(`failed to start: ${(error as Error)?.stack ?? String(error)}`);
  await releaseDashboard(layout, record);
  process.exit(1);
}
