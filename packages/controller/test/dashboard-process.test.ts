// `pi-sandbox dashboard` as a user runs it, no VM: the first call starts one detached dashboard
// for the state root, which outlives the command; later calls find it and print a new link each
// time, each opening one browser session; --status never starts one; --stop ends it.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { cliProcess } from "./support/cli-process.js";
import { pidAlive } from "../src/state/liveness.js";

const { cli, dir } = cliProcess("cli-dash-");
const json = (...args: string[]) => {
  const run = cli(...args, "--json");
  if (run.status !== 0) throw new Error(`pi-sandbox ${args.join(" ")} exited ${run.status}: ${run.stderr}`);
  return JSON.parse(run.stdout) as {
    url?: string;
    pid?: number;
    port?: number;
    started?: boolean;
    running?: boolean;
    stopped?: boolean;
  };
};
let pid: number | undefined;
afterAll(() => {
  if (pid !== undefined && pidAlive(pid)) process.kill(pid, "SIGKILL");
});

test("dashboard starts one server that outlives the command, and each call prints a new link to it", async () => {
  expect(json("dashboard", "--status")).toEqual({ running: false });
  const first = json("dashboard");
  pid = first.pid;
  expect(first).toMatchObject({ started: true });
  expect(first.url).toMatch(/^http:\/\/127\.0\.0\.1:[0-9]+\/\?token=[\w-]+\.[\w-]+$/);
  expect(pidAlive(first.pid!)).toBe(true);
  const again = json("dashboard");
  expect(again).toMatchObject({ started: false, pid: first.pid, port: first.port });
  expect(again.url).not.toBe(first.url);
  expect(json("dashboard", "--status")).toMatchObject({ pid: first.pid });
  for (const url of [first.url!, again.url!]) expect((await fetch(url, { redirect: "manual" })).status).toBe(303);
  // Each link opens one session: the second use of a printed link is refused.
  const reused = await fetch(first.url!, { redirect: "manual" });
  expect(reused.status).toBe(403);
  expect(await reused.text()).toContain("this link was already used");
  expect((await fetch(`http://127.0.0.1:${first.port}/`)).status).toBe(403);
  const record = await readFile(join(dir(), "state", "dashboard.json"), "utf8");
  expect(JSON.parse(record)).toMatchObject({ pid: first.pid, port: first.port });
  const text = cli("dashboard");
  expect(text.stdout).toMatch(/^dashboard running \(pid [0-9]+\): open\nhttp:\/\/127\.0\.0\.1:/);
});

test("dashboard --stop ends it, and a second --stop says none runs", () => {
  expect(json("dashboard", "--stop")).toEqual({ stopped: true, pid });
  expect(pidAlive(pid!)).toBe(false);
  expect(json("dashboard", "--stop")).toEqual({ stopped: false });
  expect(cli("dashboard", "--stop", "--status").status).not.toBe(0);
});
