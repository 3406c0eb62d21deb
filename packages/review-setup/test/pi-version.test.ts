// `sandbox:setup --check-pi`: the lockfile's Pi against the registry's latest, with the exit codes
// of the seed's check-pi-version.sh (0 current, 1 update, 2 could not check), over real HTTP from
// a fake registry and against a dead port for offline.
import http from "node:http";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main } from "../src/main.js";
import { compareVersions, PI_PACKAGE } from "../src/pi-version.js";

let repo: string;
let server: http.Server;
let registry: string;
let latest: string | undefined = "1.6.0";
const paths: string[] = [];

beforeAll(async () => {
  repo = await mkdtemp(join(tmpdir(), "pi-version-"));
  const lock = { lockfileVersion: 3, packages: { "": {}, [`node_modules/${PI_PACKAGE}`]: { version: "1.6.0" } } };
  await writeFile(join(repo, "package-lock.json"), JSON.stringify(lock));
  server = http.createServer((req, res) => {
    paths.push(req.url ?? "");
    if (latest === undefined) return void res.writeHead(503).end("down");
    res
      .writeHead(200, { "content-type": "application/json" })
      .end(JSON.stringify({ name: PI_PACKAGE, version: latest }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  registry = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
});
afterAll(async () => {
  server.close();
  await rm(repo, { recursive: true, force: true });
});

async function check(env: NodeJS.ProcessEnv, cwd = repo): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await main(["--check-pi"], {
    stdout: (t) => (stdout += t),
    stderr: (t) => (stderr += t),
    env,
    cwd,
  });
  return { code, stdout, stderr };
}

test("the pinned Pi is current: exit 0; an update on the registry: exit 1 naming both versions", async () => {
  latest = "1.6.0";
  expect(await check({ npm_config_registry: registry })).toEqual({
    code: 0,
    stdout: "Pi 1.6.0 (pinned in package-lock.json) is current.\n",
    stderr: "",
  });
  expect(paths.at(-1)).toBe("/@earendil-works%2fpi-coding-agent/latest");
  latest = "1.7.1";
  const update = await check({ npm_config_registry: registry });
  expect(update.code).toBe(1);
  expect(update.stdout).toMatch(
    /^Pi 1\.6\.0 is pinned \(package-lock\.json\); 1\.7\.1 is on the registry\. To update:/,
  );
});

test("offline, a registry error or no pin: exit 2, saying it could not check", async () => {
  const dead = http.createServer();
  await new Promise<void>((resolve) => dead.listen(0, "127.0.0.1", resolve));
  const deadPort = (dead.address() as AddressInfo).port;
  await new Promise<void>((resolve) => dead.close(() => resolve()));
  const offline = await check({ npm_config_registry: `http://127.0.0.1:${deadPort}/` });
  expect(offline.code).toBe(2);
  expect(offline.stderr).toMatch(/^could not check: http:\/\/127\.0\.0\.1:\d+ cannot be reached .*offline\?\n$/);
  latest = undefined;
  expect(await check({ npm_config_registry: registry })).toMatchObject({
    code: 2,
    stderr: expect.stringMatching(/^could not check: .* answered HTTP 503/),
  });
  const empty = await mkdtemp(join(tmpdir(), "pi-version-none-"));
  try {
    await writeFile(join(empty, "package-lock.json"), JSON.stringify({ packages: {} }));
    expect(await check({ npm_config_registry: registry }, empty)).toMatchObject({
      code: 2,
      stderr: expect.stringContaining(`pins no ${PI_PACKAGE}`),
    });
  } finally {
    await rm(empty, { recursive: true, force: true });
  }
});

test("versions compare by number, a prerelease before its release", () => {
  expect(compareVersions("1.10.0", "1.9.9")).toBe(1);
  expect(compareVersions("1.6.0", "1.6.0")).toBe(0);
  expect(compareVersions("1.7.0-beta.1", "1.7.0")).toBe(-1);
  expect(compareVersions("1.6.0", "1.7.0-beta.1")).toBe(-1);
});
