// Starting the state root's dashboard detached when none runs, finding it when one does, and
// ending it: `pi-sandbox dashboard [--stop]` and Pi's `/sandbox dashboard`. Each call mints a
// fresh link token with the key in the dashboard's private record.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, open, readFile, unlink } from "node:fs/promises";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { mintToken } from "./tokens.js";
import { portAnswers } from "../probes.js";
import { readDashboardRecord, recordAlive, type DashboardRecord } from "./record.js";
import { ControllerError } from "../errors.js";
import type { StateLayout } from "../state/layout.js";
import { findDaemonNode } from "../node-floor.js";

/** Where the dashboard runs, and a fresh link to it. */
export interface DashboardInfo {
  /** The link to open: `http://127.0.0.1:<port>/?token=…` (the token starts a browser session). */
  url: string;
  /** Its port on 127.0.0.1. */
  port: number;
  /** The dashboard process. */
  pid: number;
  /** True when this call started it, false when it was running already. */
  started: boolean;
}

/**
 * V8 flags of the dashboard: it waits on I/O, so the interpreter alone (lite mode, about 10 MiB
 * less resident) and a small young generation keep it light beside the VMs it watches.
 */
const DASHBOARD_NODE_FLAGS = ["--lite-mode", "--max-semi-space-size=1"];

/** How long a fresh dashboard may take to listen, in ms. */
const START_TIMEOUT_MS = 30_000;
/** How long a stopped dashboard gets to exit before SIGKILL, in ms. */
const STOP_GRACE_MS = 5_000;

/** The compiled dashboard entry, `dist/dashboard/main.js` (the client may run from sources in tests). */
export function dashboardEntry(): string {
  const fromSources = import.meta.url.endsWith(".ts");
  return fileURLToPath(new URL(fromSources ? "../../dist/dashboard/main.js" : "./main.js", import.meta.url));
}

async function running(layout: StateLayout): Promise<(DashboardRecord & { port: number }) | undefined> {
  const record = await readDashboardRecord(layout);
  if (!record || record.port === undefined || !recordAlive(record)) return undefined;
  return (await portAnswers(record.port)) ? (record as DashboardRecord & { port: number }) : undefined;
}

function info(record: DashboardRecord & { port: number }, started: boolean): DashboardInfo {
  const url = `http://127.0.0.1:${record.port}/?token=${mintToken(record.key)}`;
  return { url, port: record.port, pid: record.pid, started };
}

/** The running dashboard's link, or `undefined` when none runs (starts nothing). */
export async function findDashboard(layout: StateLayout): Promise<DashboardInfo | undefined> {
  const record = await running(layout);
  return record ? info(record, false) : undefined;
}

/** Makes sure the state root's dashboard runs (spawning it detached) and returns a fresh link to it. */
export async function ensureDashboard(
  layout: StateLayout,
  options: { env?: NodeJS.ProcessEnv; signal?: AbortSignal } = {},
): Promise<DashboardInfo> {
  await layout.ensurePrivate();
  const found = await running(layout);
  if (found) return info(found, false);
  const entry = dashboardEntry();
  if (!existsSync(entry)) {
    throw new ControllerError("CONTROLLER_DASHBOARD_START_FAILED", `the dashboard script ${entry} is missing`, {
      hint: "Build the package (npm run build) or reinstall it.",
      details: { entry },
    });
  }
  const env = options.env ?? process.env;
  const logFile = layout.dashboardLogFile();
  await mkdir(dirname(logFile), { recursive: true, mode: 0o700 });
  const log = await open(logFile, "a", 0o600);
  const child = spawn(findDaemonNode(env), [...DASHBOARD_NODE_FLAGS, entry, "--root", layout.root], {
    detached: true,
    stdio: ["ignore", log.fd, log.fd],
    env: { ...env, PI_SANDBOX_HOME: layout.root },
  });
  await log.close();
  let exited: number | null | undefined;
  child.once("exit", (code) => (exited = code));
  child.unref();
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (options.signal?.aborted) throw options.signal.reason;
    const record = await running(layout);
    // Exit 0 means another dashboard won the race to claim the root: its record comes up instead.
    if (record) return info(record, record.pid === child.pid);
    if (exited !== undefined && exited !== 0) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const tail = (await readFile(logFile, "utf8").catch(() => "")).split("\n").slice(-20).join("\n").trim();
  throw new ControllerError(
    "CONTROLLER_DASHBOARD_START_FAILED",
    exited !== undefined
      ? `the dashboard exited during startup (code ${exited})`
      : `the dashboard did not listen within ${START_TIMEOUT_MS / 1000} s`,
    { hint: `See its log: ${logFile}`, details: { logFile, logTail: tail } },
  );
}

/** Ends the state root's dashboard (SIGTERM, then SIGKILL after 5 s); false when none ran. */
export async function stopDashboard(layout: StateLayout): Promise<{ stopped: boolean; pid?: number }> {
  const record = await readDashboardRecord(layout);
  if (!record) return { stopped: false };
  if (!recordAlive(record)) {
    await unlink(layout.dashboardFile()).catch(() => undefined);
    return { stopped: false };
  }
  const signal = (name: NodeJS.Signals) => {
    try {
      process.kill(record.pid, name);
    } catch {
      // gone already
    }
  };
  signal("SIGTERM");
  const deadline = Date.now() + STOP_GRACE_MS;
  while (recordAlive(record) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  if (recordAlive(record)) signal("SIGKILL");
  const current = await readDashboardRecord(layout);
  if (current?.pid === record.pid) await unlink(layout.dashboardFile()).catch(() => undefined);
  return { stopped: true, pid: record.pid };
}
