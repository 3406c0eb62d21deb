// `sandbox:setup --check-pi`: is the Pi the guest gets (the version the checkout's package-lock.json
// pins) the newest on the npm registry? Exit 0 when current, 1 when an update exists, 2 when it
// could not be checked (offline, registry error, no pin), as the seed's check-pi-version.sh does.
import { readFile } from "node:fs/promises";
import { join } from "node:path";

/** Pi's npm package, whose version the lockfile pins. */
export const PI_PACKAGE = "@earendil-works/pi-coding-agent";

/** Default registry; `npm_config_registry` (as npm sets it for scripts) overrides it. */
export const DEFAULT_REGISTRY = "https://registry.npmjs.org/";

/** Registry wait, in ms. */
const REGISTRY_TIMEOUT_MS = 10_000;

/** What the check found; `exitCode` is the process's. */
export interface PiVersionCheck {
  /** 0 current, 1 update available, 2 could not check. */
  exitCode: 0 | 1 | 2;
  /** The pinned version, if the lockfile has one. */
  pinned?: string;
  /** The registry's `latest`, if it answered. */
  latest?: string;
  /** One line for the user. */
  message: string;
}

/** Seams of `checkPiVersion`. */
export interface PiVersionOptions {
  /** Checkout root holding package-lock.json. */
  repo: string;
  /** Environment (`npm_config_registry`). */
  env?: NodeJS.ProcessEnv;
  /** `fetch` (tests pass a fake). */
  fetch?: typeof fetch;
  signal?: AbortSignal;
}

/** The version of Pi the checkout's lockfile pins, or undefined. */
export async function pinnedPiVersion(repo: string): Promise<string | undefined> {
  const lock = JSON.parse(await readFile(join(repo, "package-lock.json"), "utf8")) as {
    packages?: Record<string, { version?: unknown }>;
  };
  const version = lock.packages?.[`node_modules/${PI_PACKAGE}`]?.version;
  return typeof version === "string" ? version : undefined;
}

/** Compares dotted numeric versions (a prerelease counts as older than its release). */
export function compareVersions(a: string, b: string): number {
  const parse = (v: string) => {
    const [core = "", pre] = v.split("-", 2);
    return { parts: core.split(".").map((n) => Number.parseInt(n, 10) || 0), pre };
  };
  const x = parse(a);
  const y = parse(b);
  for (let i = 0; i < Math.max(x.parts.length, y.parts.length); i++) {
    const d = (x.parts[i] ?? 0) - (y.parts[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  if (x.pre === y.pre) return 0;
  if (x.pre === undefined) return 1;
  if (y.pre === undefined) return -1;
  return x.pre < y.pre ? -1 : 1;
}

/** Checks the pinned Pi against the registry's `latest`; never throws. */
export async function checkPiVersion(options: PiVersionOptions): Promise<PiVersionCheck> {
  let pinned: string | undefined;
  try {
    pinned = await pinnedPiVersion(options.repo);
  } catch (error) {
    return {
      exitCode: 2,
      message: `could not check: ${join(options.repo, "package-lock.json")} cannot be read (${(error as Error).message})`,
    };
  }
  if (!pinned) {
    return { exitCode: 2, message: `could not check: package-lock.json in ${options.repo} pins no ${PI_PACKAGE}` };
  }
  const registry = (options.env ?? process.env).npm_config_registry || DEFAULT_REGISTRY;
  const url = new URL(`${PI_PACKAGE.replace("/", "%2f")}/latest`, registry.endsWith("/") ? registry : `${registry}/`);
  let latest: unknown;
  try {
    const signal = options.signal
      ? AbortSignal.any([options.signal, AbortSignal.timeout(REGISTRY_TIMEOUT_MS)])
      : AbortSignal.timeout(REGISTRY_TIMEOUT_MS);
    const response = await (options.fetch ?? fetch)(url, { headers: { accept: "application/json" }, signal });
    if (!response.ok) {
      return { exitCode: 2, pinned, message: `could not check: ${url.origin} answered HTTP ${response.status}` };
    }
    latest = ((await response.json()) as { version?: unknown }).version;
  } catch (error) {
    const why = (error as Error).name === "TimeoutError" ? "no answer in 10 s" : (error as Error).message;
    return { exitCode: 2, pinned, message: `could not check: ${url.origin} cannot be reached (${why}); offline?` };
  }
  if (typeof latest !== "string" || !/^\d+\.\d+\.\d+[\w.+-]*$/.test(latest)) {
    return { exitCode: 2, pinned, message: `could not check: ${url.origin} gave no version for ${PI_PACKAGE}` };
  }
  if (compareVersions(latest, pinned) > 0) {
    return {
      exitCode: 1,
      pinned,
      latest,
      message:
        `Pi ${pinned} is pinned (package-lock.json); ${latest} is on the registry. To update: npm install ${PI_PACKAGE}@${latest} ` +
        "in the workspaces that depend on it, commit the lockfile, then rerun sandbox:setup (the guest gets the new Pi with the next refresh).",
    };
  }
  return { exitCode: 0, pinned, latest, message: `Pi ${pinned} (pinned in package-lock.json) is current.` };
}
