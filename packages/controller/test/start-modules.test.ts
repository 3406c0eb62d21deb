// What a start loads before its daemon runs: the early start of `pi-sandbox start <name>` spawns
// the daemon after a few small modules (no config schema, YAML or VM host probes), and the action
// table every CLI command and daemon loads holds every action's declarations without loading the
// handlers kept in modules of their own (kit/lazy.ts), each loaded on its action's first call.
// Node's compile cache (compile-cache.ts, on in the CLI and the daemon) only ever speeds a start:
// a cache directory that cannot be made leaves it off, and the command runs.
// Fresh Node processes running the sources, their modules recorded (support/loaded-modules.ts).
import { spawnSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { handlerLoader, lazyHandler } from "../src/actions/kit/lazy.js";
import { ACTIONS } from "../src/actions/kit/registry.js";
import { inFreshProcess, shortPaths } from "./support/loaded-modules.js";

const BIN = fileURLToPath(new URL("../bin/pi-sandbox.js", import.meta.url));

/** The modules of the handlers kept apart, and what only they bring. */
const HANDLER_MODULES = [
  "packages/controller/src/actions/dashboard-run.ts",
  "packages/controller/src/dashboard/launch.ts",
  "packages/controller/src/actions/apply-run.ts",
  "packages/controller/src/actions/patch-apply.ts",
  "packages/controller/src/actions/doctor-checks.ts",
];

/** What the table declares of each action: everything but the handlers themselves. */
const DECLARATIONS = `
const declarations = (actions) =>
  actions.map((spec) => ({
    name: spec.name,
    summary: spec.summary,
    args: spec.args,
    route: spec.route,
    long: spec.long ?? false,
    userOnly: spec.userOnly ?? false,
    hostOnly: spec.hostOnly ?? false,
    irreversible: spec.irreversible ?? false,
    lifecycle: spec.lifecycle ?? null,
    schema: typeof spec.schema?.kind,
    refine: typeof spec.refine,
    run: typeof spec.run,
    runLocally: typeof spec.runLocally,
    cli: spec.cli ? { usage: spec.cli.usage, options: Object.keys(spec.cli.options ?? {}), aliases: spec.cli.aliases ?? [] } : null,
  }));
`;

describe("the early start of pi-sandbox start", () => {
  it("spawns the daemon after loading neither the config schema, YAML, undici nor the VM host probes", async () => {
    const out = await inFreshProcess(`
await load("src/client/early-start.ts");
console.log(JSON.stringify(mark()));
`);
    const loaded = shortPaths(JSON.parse(out) as string[]);
    expect(loaded).toContain("packages/controller/src/client/spawn.ts");
    const heavy = loaded.filter((path) =>
      /node_modules\/(valibot|yaml|undici|@valibot)\/|packages\/config\/src\/(index|schema|parse)\.ts|packages\/vm\/src\/host\.ts|packages\/image\//.test(
        path,
      ),
    );
    expect(heavy).toEqual([]);
    // A few dozen modules, not the ~70 it took with the config package's index.
    expect(loaded.length).toBeLessThan(40);
  });
});

describe("the action table", () => {
  it("declares every action completely without loading a handler kept apart", async () => {
    const out = await inFreshProcess(`
${DECLARATIONS}
const { ACTIONS } = await load("src/actions/kit/registry.ts");
console.log(JSON.stringify({ loaded: mark(), declarations: declarations(ACTIONS) }));
`);
    const { loaded, declarations } = JSON.parse(out) as { loaded: string[]; declarations: unknown[] };
    expect(shortPaths(loaded).filter((path) => HANDLER_MODULES.includes(path))).toEqual([]);
    // The same declarations as this process's table, where nothing was held back.
    const here = new Function("actions", `${DECLARATIONS}; return declarations(actions);`) as (
      actions: readonly unknown[],
    ) => unknown[];
    expect(JSON.parse(JSON.stringify(here(ACTIONS)))).toEqual(declarations);
    expect(declarations).toHaveLength(ACTIONS.length);
  });

  it("loads a handler's module on the action's first call, and runs it", async () => {
    const root = await mkdtemp(join(tmpdir(), "start-modules-"));
    try {
      const out = await inFreshProcess(`
const { ACTIONS } = await load("src/actions/kit/registry.ts");
const { StateLayout } = await load("src/state/layout.ts");
const dashboard = ACTIONS.find((spec) => spec.name === "dashboard");
const before = mark();
const layout = new StateLayout(${JSON.stringify(join(root, "state"))});
const result = await dashboard.run({ action: "dashboard", status: true }, { layout, cwd: ${JSON.stringify(root)}, env: {}, actions: ACTIONS });
console.log(JSON.stringify({ before, after: mark(), result }));
`);
      const { before, after, result } = JSON.parse(out) as { before: string[]; after: string[]; result: unknown };
      const run = "packages/controller/src/actions/dashboard-run.ts";
      expect(shortPaths(before)).not.toContain(run);
      expect(shortPaths(after)).toContain(run);
      expect(result).toEqual({ running: false });
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("has a loadable handler behind every lazily loaded action", async () => {
    const lazy = ACTIONS.filter((spec) => handlerLoader(spec.run) !== undefined).map((spec) => spec.name);
    expect(lazy).toEqual(expect.arrayContaining(["dashboard", "apply", "doctor"]));
    for (const spec of ACTIONS) {
      const loader = handlerLoader(spec.run);
      if (loader) expect(typeof (await loader())).toBe("function");
    }
  });
});

describe("lazyHandler", () => {
  it("loads once, passes the arguments on, and loads again after a failed load", async () => {
    let loads = 0;
    let fail = true;
    const run = lazyHandler(async () => {
      loads++;
      if (fail) throw new Error("cannot load");
      return async (a: number, b: number) => a + b;
    });
    await expect(run(1, 2)).rejects.toThrow("cannot load");
    fail = false;
    await expect(run(1, 2)).resolves.toBe(3);
    await expect(run(3, 4)).resolves.toBe(7);
    expect(loads).toBe(2);
    expect(handlerLoader(run)).toBeDefined();
    expect(handlerLoader(async () => 1)).toBeUndefined();
  });
});

describe("the compile cache", () => {
  it("leaves a start alone when its directory cannot be made", async () => {
    const base = await mkdtemp(join(tmpdir(), "compile-cache-"));
    try {
      const file = join(base, "a-file");
      await writeFile(file, "not a directory\n");
      const manifest = (await import("../package.json", { with: { type: "json" } })).default as { version: string };
      // Under a regular file (no directory can be made there), and where even root makes none (sysfs).
      for (const cacheHome of [join(file, "cache"), "/sys"]) {
        const out = await inFreshProcess(`
const { getCompileCacheDir } = await import("node:module");
const { enableOwnCompileCache } = await load("src/compile-cache.ts");
enableOwnCompileCache({ XDG_CACHE_HOME: ${JSON.stringify(cacheHome)} });
const { StateLayout } = await load("src/state/layout.ts");
console.log(JSON.stringify({ dir: getCompileCacheDir() ?? null, loaded: typeof StateLayout }));
`);
        expect(JSON.parse(out)).toEqual({ dir: null, loaded: "function" });
        // The command as npm links it (dist/, built), cache first.
        const run = spawnSync(process.execPath, [BIN, "--version"], {
          encoding: "utf8",
          env: { ...process.env, XDG_CACHE_HOME: cacheHome },
          timeout: 60_000,
        });
        expect(run.stderr).toBe("");
        expect(run.stdout).toBe(`pi-sandbox ${manifest.version}\n`);
        expect(run.status).toBe(0);
      }
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});
