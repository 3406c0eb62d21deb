// `pi install` of this package's npm tarball into a fresh agent dir, then a plain Pi run (no -e)
// loads the tool from settings. The workspace packages are not published, so they are packed too
// and the agent's npm project pins them to those tarballs with `overrides`; third-party
// dependencies come from the registry (through a shared npm cache under the temp dir).

import { execFileSync } from "node:child_process";
import { existsSync, lstatSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { renderHelp } from "@pi-sandbox/controller/client";
import { startFakeOpenAI, type FakeOpenAI } from "./support/fake-openai.js";
import {
  FAKE_MODEL_ARGS,
  makePiHome,
  PACKAGE_DIR,
  PiRpc,
  resultText,
  runPi,
  toolEnds,
  type PiHome,
} from "./support/pi-harness.js";

/** Workspace packages in the runtime closure of this one, by directory under packages/. */
const WORKSPACE = ["config", "image", "vm", "supervisor", "ingress", "controller", "pi-extension"];

let fake: FakeOpenAI;
let home: PiHome;
const tarballs = new Map<string, string>();

function pack(dir: string, destination: string): { name: string; file: string } {
  const out = execFileSync("npm", ["pack", "--json", "--pack-destination", destination], {
    cwd: dir,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  const [info] = JSON.parse(out) as { name: string; filename: string }[];
  return { name: info!.name, file: join(destination, info!.filename) };
}

beforeAll(async () => {
  fake = await startFakeOpenAI();
  home = await makePiHome(fake, "psi-");
  const packed = join(home.dir, "tgz");
  await mkdir(packed);
  for (const name of WORKSPACE) {
    const { name: pkg, file } = pack(resolve(PACKAGE_DIR, "..", name), packed);
    tarballs.set(pkg, file);
  }
  // Overrides pin the transitive workspace packages; the package itself is the direct install.
  const overrides = Object.fromEntries(
    [...tarballs].filter(([pkg]) => pkg !== "@pi-sandbox/pi-extension").map(([pkg, file]) => [pkg, `file:${file}`]),
  );
  await mkdir(join(home.agentDir, "npm"));
  await writeFile(
    join(home.agentDir, "npm", "package.json"),
    JSON.stringify({ name: "pi-extensions", private: true, overrides }, null, 2),
  );
});

afterAll(async () => {
  await fake.close();
  await rm(home.dir, { recursive: true, force: true });
});

test("pi install of the packed tarball, then a plain Pi run has the sandbox tool and command", async () => {
  const spec = `npm:@pi-sandbox/pi-extension@file:${tarballs.get("@pi-sandbox/pi-extension")}`;
  const installEnv: NodeJS.ProcessEnv = {
    ...home.env,
    PI_OFFLINE: "",
    npm_config_cache: join(tmpdir(), "pi-sandbox-npm-cache"),
    npm_config_prefer_offline: "true",
    npm_config_update_notifier: "false",
  };
  const install = await runPi(home, ["install", spec], { env: installEnv, timeoutMs: 600_000 });
  expect({ code: install.code, stderr: install.code === 0 ? "" : install.stderr }).toEqual({ code: 0, stderr: "" });

  const settings = JSON.parse(await readFile(join(home.agentDir, "settings.json"), "utf8")) as { packages: string[] };
  expect(settings.packages).toEqual([spec]);
  const modules = join(home.agentDir, "npm", "node_modules", "@pi-sandbox");
  for (const dir of ["pi-extension", "controller", "config"]) {
    // Real copies from the tarballs, not links back into the workspace.
    expect(lstatSync(join(modules, dir)).isDirectory()).toBe(true);
  }
  expect(existsSync(join(modules, "pi-extension", "dist", "index.js"))).toBe(true);
  expect(existsSync(join(modules, "controller", "dist", "daemon", "main.js"))).toBe(true);
  // Host packages are peers: Pi supplies them, npm must not install them.
  expect(existsSync(join(home.agentDir, "npm", "node_modules", "@earendil-works", "pi-coding-agent"))).toBe(false);

  fake.script({ tool: "sandbox", args: { input: "{}" } });
  const run = await runPi(home, [...FAKE_MODEL_ARGS, "--mode", "json", "help me"]);
  expect(run.code).toBe(0);
  const [end] = toolEnds(run.events);
  expect(end).toMatchObject({ toolName: "sandbox", isError: false });
  expect(resultText(end!)).toBe(renderHelp());

  const rpc = PiRpc.start(home, []);
  try {
    rpc.send({ id: "c", type: "get_commands" });
    const commands = await rpc.waitFor((e) => e.id === "c" && e.type === "response");
    expect(commands.data.commands.map((c: { name: string }) => c.name)).toContain("sandbox");
  } finally {
    expect(await rpc.close()).toBe(0);
  }
});
