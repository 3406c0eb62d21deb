// Five tiny instances at once on one host, created concurrently from one prepared template: each
// serves its own preview and answers exec, then all stop and no QEMU is left. The template is
// prepared with suspend, so the five creates resume its saved guest (as `create -t` of such a
// template does for a user) instead of cold-booting five kernels at once on CI's two cores (35 s
// of this file); a cold `create -t` is proved by cli-walkthrough and controller's lifecycle test.
import { fetchText, makeSandbox, qemuFor, teardown, type Sandbox } from "@pi-sandbox/controller/testing";

const YAML = `profile: tiny
diskGiB: 4
setup:
  - printf 'from setup\\n' > /workspace/index.html
services:
  web:
    command: python3 -m http.server $PORT --bind 127.0.0.1
    health: /
    preview: true
`;
const NAMES = ["one", "two", "three", "four", "five"];

let sandbox: Sandbox;

beforeAll(async () => {
  sandbox = await makeSandbox("pss-");
  await sandbox.writeConfig(YAML);
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
}, 300_000);

test("five instances created at once all run, each serving its preview and exec", async () => {
  const prepared = await sandbox.call({ action: "prepare", name: "base", config: "sandbox.yaml", suspend: true });
  expect(prepared.state).toBe("prepared");
  const t0 = Date.now();
  // allSettled: every create has finished (either way) before anything is asserted or torn down.
  const settled = await Promise.allSettled(
    NAMES.map((name) => sandbox.call({ action: "create", name, template: "base" })),
  );
  const allUp = Date.now();
  expect(
    settled.map((s) => (s.status === "fulfilled" ? [s.value.state, s.value.restore?.warm] : String(s.reason))),
  ).toEqual(NAMES.map(() => ["running", true]));
  const created = settled.map((s) => (s as PromiseFulfilledResult<Record<string, any>>).value); // eslint-disable-line @typescript-eslint/no-explicit-any -- loose JSON
  expect(qemuFor(sandbox.home)).toHaveLength(5);

  const urls = created.map((c) => c.previews[0].url as string);
  expect(new Set(urls).size).toBe(5);
  // Each instance is its own disk: mark each one, then read every preview and exec back.
  expect(await Promise.all(urls.map((url) => fetchText(url)))).toEqual(NAMES.map(() => "200 from setup\n"));
  await Promise.all(
    NAMES.map((name) =>
      sandbox.call({ action: "write", name, path: "/workspace/index.html", content: `I am ${name}\n` }),
    ),
  );
  const pages = await Promise.all(urls.map((url) => fetchText(url)));
  expect(pages).toEqual(NAMES.map((name) => `200 I am ${name}\n`));
  const execs = await Promise.all(
    NAMES.map((name) =>
      sandbox.call({ action: "exec", name, cmd: "cat /workspace/index.html; nproc", timeoutMs: 60_000 }),
    ),
  );
  expect(execs.map((e) => [e.exitCode, e.output])).toEqual(NAMES.map((name) => [0, `I am ${name}\n1\n`]));
  const served = Date.now();

  const stopped = await Promise.all(NAMES.map((name) => sandbox.call({ action: "stop", name })));
  expect(stopped.map((s) => s.state)).toEqual(NAMES.map(() => "stopped"));
  const done = Date.now();
  expect(qemuFor(sandbox.home)).toEqual([]);
  process.stderr.write(
    `scale: 5 concurrent creates ${((allUp - t0) / 1000).toFixed(1)} s, ` +
      `previews+exec ${((served - allUp) / 1000).toFixed(1)} s, 5 concurrent stops ${((done - served) / 1000).toFixed(1)} s\n`,
  );
}, 600_000);
