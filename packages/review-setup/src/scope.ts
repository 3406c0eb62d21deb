// What the install and build steps run in the candidate. `full` installs and builds the whole
// workspace; `pi` only what the printed launch command loads: the Pi extension's workspace with
// its dependencies (Pi itself is one of its dev dependencies), and the builds of the workspaces it
// depends on, in dependency order.
import { readFile } from "node:fs/promises";
import { join, posix } from "node:path";
import { shellQuote } from "@pi-sandbox/config";
import { ReviewSetupError } from "./errors.js";

/** `full`: the whole workspace. `pi`: only what the launch command needs. */
export type InstallScope = "full" | "pi";

/** The scopes, for argument checks and help. */
export const INSTALL_SCOPES: readonly InstallScope[] = ["full", "pi"];

/**
 * Frozen-lockfile install; no audit or funding requests (the guest's egress is an allow-list).
 * `--prefer-offline`: what the guest's npm cache already holds (every package of an earlier refresh
 * of the instance) is used without asking the registry again. Each registry request is costly in a
 * guest: the sandbox's HTTP egress closes the connection after every response, so each one pays a
 * new TLS handshake, seconds under TCG.
 */
export const DEFAULT_INSTALL_COMMAND = "npm ci --no-audit --no-fund --prefer-offline";

/** The whole workspace's build. */
export const DEFAULT_BUILD_COMMAND = "npm run build";

/** The workspace the default launch command loads (`pi -e ./packages/pi-extension`). */
export const PI_EXTENSION_DIR = "packages/pi-extension";

/** The commands of the install and build steps. */
export interface StepCommands {
  /** Install step, run in the candidate. */
  install: string;
  /** Build step, run in the candidate. */
  build: string;
  /** `pi` scope: the workspaces built, in order. */
  workspaces?: string[];
}

interface Workspace {
  name: string;
  dir: string;
  deps: string[];
  hasBuild: boolean;
}

/** Workspace directories named by the root package.json's `workspaces` (`dir` or `dir/*`) among `files`. */
function workspaceDirs(patterns: string[], files: readonly string[]): string[] {
  const dirs = files.filter((f) => f.endsWith("/package.json")).map((f) => posix.dirname(f));
  return dirs.filter((dir) =>
    patterns.some((pattern) => {
      const clean = pattern.replace(/^\.\//, "").replace(/\/$/, "");
      if (clean.endsWith("/*")) return posix.dirname(dir) === clean.slice(0, -2);
      return dir === clean;
    }),
  );
}

function scopeError(message: string): ReviewSetupError {
  return new ReviewSetupError("REVIEW_SETUP_USAGE", message, {
    hint: "Use --scope full (the default) for a checkout without this layout.",
  });
}

/**
 * The install and build commands for `scope`, from the checkout's package.json files (`root`
 * plus its tracked `files`, as snapshotted).
 */
export async function scopeCommands(
  scope: InstallScope,
  root: string,
  files: readonly string[],
): Promise<StepCommands> {
  if (scope === "full") return { install: DEFAULT_INSTALL_COMMAND, build: DEFAULT_BUILD_COMMAND };
  const readJson = async (rel: string) =>
    JSON.parse(await readFile(join(root, rel), "utf8")) as Record<string, unknown> & {
      name?: string;
      workspaces?: string[] | { packages?: string[] };
      scripts?: Record<string, string>;
    };
  const rootPkg = await readJson("package.json").catch(() => {
    throw scopeError("--scope pi needs a package.json at the checkout root");
  });
  const patterns = Array.isArray(rootPkg.workspaces) ? rootPkg.workspaces : (rootPkg.workspaces?.packages ?? []);
  const byName = new Map<string, Workspace>();
  for (const dir of workspaceDirs(patterns, files)) {
    const pkg = await readJson(`${dir}/package.json`);
    if (!pkg.name) continue;
    const deps = ["dependencies", "devDependencies", "optionalDependencies", "peerDependencies"].flatMap((field) =>
      Object.keys((pkg[field] as Record<string, string> | undefined) ?? {}),
    );
    byName.set(pkg.name, { name: pkg.name, dir, deps, hasBuild: typeof pkg.scripts?.build === "string" });
  }
  const target = [...byName.values()].find((w) => w.dir === PI_EXTENSION_DIR);
  if (!target) throw scopeError(`--scope pi needs the workspace ${PI_EXTENSION_DIR} in the checkout`);

  // Depth-first post-order over workspace dependencies: each workspace after the ones it uses.
  const order: Workspace[] = [];
  const state = new Map<string, "visiting" | "done">();
  const visit = (w: Workspace, path: string[]) => {
    if (state.get(w.name) === "done") return;
    if (state.get(w.name) === "visiting") {
      throw scopeError(`workspace dependency cycle: ${[...path, w.name].join(" -> ")}`);
    }
    state.set(w.name, "visiting");
    for (const dep of w.deps) {
      const next = byName.get(dep);
      if (next) visit(next, [...path, w.name]);
    }
    state.set(w.name, "done");
    order.push(w);
  };
  visit(target, []);
  const built = order.filter((w) => w.hasBuild).map((w) => w.name);
  return {
    install: `${DEFAULT_INSTALL_COMMAND} --workspace ${shellQuote(target.name)}`,
    build: built.map((name) => `npm run build --workspace ${shellQuote(name)}`).join(" && ") || "true",
    workspaces: built,
  };
}
