// `pi-sandbox logs -f`, `cp` and exec's separate streams, through the real CLI and one real instance
// for the whole file. Run after a build (the CLI and daemon run from dist/).
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { lstat, mkdir, readFile, readdir, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { makeSandbox, teardown, until, type Sandbox } from "../src/testing.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const NAME = "cf";
const YAML = `profile: tiny
diskGiB: 4
services:
  feed:
    command: touch /workspace/feed.txt && exec tail -n 0 -F /workspace/feed.txt
    health: process
`;

let sandbox: Sandbox;

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `pi-sandbox …args`; `onStart` gets the child and the run, whose stdout grows as it prints. */
function cli(
  args: string[],
  onStart?: (child: ReturnType<typeof spawn>, run: CliRun) => void,
  stdin = "",
): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: sandbox.dir, env: sandbox.env });
    const run: CliRun = { code: null, stdout: "", stderr: "" };
    child.stdout.setEncoding("utf8").on("data", (text: string) => (run.stdout += text));
    child.stderr.setEncoding("utf8").on("data", (text: string) => (run.stderr += text));
    child.stdin.end(stdin);
    child.once("error", reject);
    child.once("close", (code) => {
      run.code = code;
      resolve(run);
    });
    onStart?.(child, run);
  });
}

const guest = async (command: string) => {
  const run = await cli(["exec", NAME, "--", command]);
  expect(run.code).toBe(0);
  return run.stdout;
};

beforeAll(async () => {
  sandbox = await makeSandbox("cf-");
  await sandbox.writeConfig(YAML);
  const created = await sandbox.call({ action: "create", name: NAME, config: "sandbox.yaml" });
  expect(created.state).toBe("running");
});

afterAll(async () => {
  expect(await teardown(sandbox)).toEqual([]);
});

test("logs -f prints lines written after it started, across a restart of the service, until Ctrl-C", async () => {
  await guest("echo before >> feed.txt");
  let follower: ReturnType<typeof spawn> | undefined;
  let seen: CliRun = { code: null, stdout: "", stderr: "" };
  const following = cli(["logs", NAME, "feed", "-f"], (child, run) => {
    follower = child;
    seen = run;
  });
  // Each step waits for what the follower printed; the next line is written only then. A step
  // that waits in vain fails with what the follower had printed, instead of hanging the file.
  const printed = (pattern: RegExp, what: string, timeoutMs = 60_000) =>
    until(
      () => `logs -f to print ${what} (${timeoutMs} ms); it printed:\n${seen.stdout}${seen.stderr}`,
      () => pattern.test(seen.stdout),
      timeoutMs,
    );
  try {
    await printed(/^before$/m, "the line written before it started");
    await guest("echo after-1 >> feed.txt");
    await printed(/^after-1$/m, "a line written while it followed");
    // The service's shell is killed: the agent notes the exit in the log and restarts it 1 s later.
    await guest("pkill -f 'tail -n 0 -[F]'");
    await printed(/restarting/, "the agent's note of the service's exit");
    await printed(/started pid \d+ .*\(restart 1\)/, "the agent's note of the service's restart");
    // The new tail starts at the end of the file: write until one line lands after it started.
    for (let i = 0; i < 30 && !/^after-2$/m.test(seen.stdout); i++) {
      await guest("echo after-2 >> feed.txt");
      await new Promise((r) => setTimeout(r, 1000));
    }
    await printed(/^after-2$/m, "a line written after the service restarted", 1_000);
  } finally {
    follower?.kill("SIGINT");
  }
  const run = await following;
  expect(run.stderr).toBe("");
  expect(run.code).toBe(130);
  expect(run.stdout).toMatch(/^before\nafter-1\n[^]*restarting[^]*\(restart 1\)[^]*\nafter-2\n/m);
});

const sha256 = (data: Buffer) => createHash("sha256").update(data).digest("hex");

/** 512-byte sectors the guest read from and wrote to its transfer disk so far (/sys/block/<dev>/stat). */
async function transferDiskSectors(): Promise<{ read: number; written: number }> {
  const stat = await guest(
    'for d in /sys/block/*; do [ "$(cat $d/serial 2>/dev/null)" = pisb-transfer ] && cat $d/stat; done; true',
  );
  const fields = stat.trim().split(/\s+/).map(Number);
  return { read: fields[2] ?? 0, written: fields[6] ?? 0 };
}

test("cp: a 20 MiB random file goes in and comes back byte for byte through the transfer disk, sha256 verified", async () => {
  const data = randomBytes(20 * 1024 * 1024);
  await writeFile(join(sandbox.dir, "big.bin"), data, { mode: 0o640 });
  const before = await transferDiskSectors();
  let started = performance.now();
  const sent = await cli(["cp", "big.bin", `${NAME}:big.bin`]);
  const inMs = performance.now() - started;
  expect(sent).toMatchObject({ code: 0, stderr: "" });
  expect(sent.stdout).toBe(
    `copied 1 file, ${data.length} bytes to ${NAME}:/workspace/big.bin\nsha256 ${sha256(data)} (verified)\n`,
  );
  expect(await guest("sha256sum big.bin; stat -c %a big.bin")).toBe(`${sha256(data)}  big.bin\n640\n`);
  // The bytes crossed the transfer disk (the guest read them from its drive), not the stream.
  const between = await transferDiskSectors();
  expect(between.read - before.read).toBeGreaterThanOrEqual(data.length / 512);
  started = performance.now();
  const back = await cli(["cp", `${NAME}:/workspace/big.bin`, "back.bin"]);
  const outMs = performance.now() - started;
  expect(back).toMatchObject({ code: 0, stderr: "" });
  expect((await readFile(join(sandbox.dir, "back.bin"))).equals(data)).toBe(true);
  expect((await lstat(join(sandbox.dir, "back.bin"))).mode & 0o777).toBe(0o644); // as before: a single file comes out 0644
  expect((await transferDiskSectors()).written - between.written).toBeGreaterThanOrEqual(data.length / 512);
  // The figures, for the CI log (the bench measures them properly): 20 MiB each way.
  const rate = (ms: number) => `${(20 / (ms / 1000)).toFixed(1)} MiB/s`;
  process.stderr.write(`cp 20 MiB: into the guest ${rate(inMs)}, out of it ${rate(outMs)}\n`);
});

test("cp: a directory goes in and comes back recursively; links are skipped and said so", async () => {
  const tree = join(sandbox.dir, "tree");
  await mkdir(join(tree, "sub", "deeper"), { recursive: true });
  await mkdir(join(tree, "empty"));
  const binary = randomBytes(300 * 1024);
  await writeFile(join(tree, "top.txt"), "top\n");
  await writeFile(join(tree, "sub", "deeper", "blob.bin"), binary);
  await writeFile(join(tree, "sub", "run.sh"), "#!/bin/sh\necho ran\n", { mode: 0o755 });
  await symlink("top.txt", join(tree, "link"));
  const sent = await cli(["cp", "tree", `${NAME}:`]);
  expect(sent).toMatchObject({ code: 0, stderr: "" });
  expect(sent.stdout).toMatch(
    /^copied 3 files, 4 directories, \d+ bytes to cf:\/workspace\nskipped 1 link\(s\) or special file\(s\): link \(symlink\)\n$/,
  );
  expect(await guest("cd tree && find . | sort && sub/run.sh")).toBe(
    ".\n./empty\n./sub\n./sub/deeper\n./sub/deeper/blob.bin\n./sub/run.sh\n./top.txt\nran\n",
  );
  await mkdir(join(sandbox.dir, "out"));
  // Host and guest sources mixed: a usage error.
  expect((await cli(["cp", "tree", `${NAME}:tree`, "out/"])).code).toBe(2);
  // On a terminal, with a progress bar that ends at 100%.
  const got = await onTerminal(["cp", `${NAME}:tree`, "out/"], /(?!)/, "");
  expect(got.code).toBe(0);
  expect(got.screen).toMatch(/\[copy\] \[#{24}\] 100% .*\r?\ncopied 3 files, 4 directories, /);
  const copy = join(sandbox.dir, "out", "tree");
  expect((await readdir(copy)).sort()).toEqual(["empty", "sub", "top.txt"]);
  expect((await readFile(join(copy, "sub", "deeper", "blob.bin"))).equals(binary)).toBe(true);
  expect((await lstat(join(copy, "sub", "run.sh"))).mode & 0o777).toBe(0o755);
  expect((await lstat(join(copy, "empty"))).isDirectory()).toBe(true);
});

test("exec: guest stdout goes to stdout and stderr to stderr, each as it comes", async () => {
  const run = await cli([
    "exec",
    NAME,
    "--",
    "sh",
    "-c",
    "echo out1; echo err1 >&2; sleep 1; echo out2; echo err2 >&2; exit 3",
  ]);
  expect(run).toEqual({ code: 3, stdout: "out1\nout2\n", stderr: "err1\nerr2\n" });
  // -d keeps one result text, both streams in it.
  const detached = await cli(["exec", NAME, "-d", "--timeout", "20000", "--", "sh", "-c", "echo o; echo e >&2"]);
  expect(detached).toEqual({ code: 0, stdout: "o\ne\n", stderr: "" });
});

/**
 * Runs `pi-sandbox …args` on a pseudo-terminal (util-linux `script`), typing `input` once `ready`
 * matches what the terminal shows. The terminal merges stdout and stderr, with CRLF line ends.
 */
function onTerminal(args: string[], ready: RegExp, input: string): Promise<{ code: number | null; screen: string }> {
  const quote = (word: string) => `'${word.replace(/'/g, "'\\''")}'`;
  return new Promise((resolve, reject) => {
    const command = [process.execPath, CLI, ...args].map(quote).join(" ");
    const child = spawn("script", ["-qefc", command, "/dev/null"], { cwd: sandbox.dir, env: sandbox.env });
    let screen = "";
    let typed = false;
    child.stdout.setEncoding("utf8").on("data", (text: string) => {
      screen += text;
      if (!typed && ready.test(screen)) {
        typed = true;
        child.stdin.write(input);
      }
    });
    child.stderr.setEncoding("utf8").on("data", (text: string) => (screen += text));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, screen }));
  });
}

test("exec -i forwards stdin; -it gives the command a terminal; both in exec's directory with -e", async () => {
  const piped = await cli(
    ["exec", "-i", NAME, "-e", "X=1", "--", "sh", "-c", 'tr a-z A-Z; echo "$X $PWD"'],
    undefined,
    "hello\n",
  );
  expect(piped).toEqual({ code: 0, stdout: "HELLO\n1 /workspace\n", stderr: "" });
  // -t without a terminal on stdin is refused, as docker does: pi-sandbox's own failure, 125.
  expect((await cli(["exec", "-it", NAME, "--", "true"])).code).toBe(125);
  const session = await onTerminal(
    ["exec", "-it", NAME, "--", "sh", "-c", 'tty; printf "name? "; read name; echo "got:$name"; exit 5'],
    /name\? /,
    "abc\r",
  );
  expect(session.screen).toMatch(/^\/dev\/pts\/\d+\r?$/m);
  expect(session.screen).toMatch(/got:abc/);
  expect(session.code).toBe(5);
});
