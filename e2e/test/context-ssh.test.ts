// A walkthrough through a context: another account with its own pi-sandbox, reached over a real
// sshd (the controller's testing-ssh.ts). The laptop's CLI adds the context, creates an instance there from
// a sandbox.yaml read here (its file: secret read here, never written there), runs commands with
// their exit codes, stdin (exec -i) and Ctrl-C (to the CLI's whole process group, as a terminal
// sends it), follows a log, copies files both ways, opens the
// preview through the address and port forwarded here (the far side's Host guard answers),
// refuses a config that mounts a directory of this machine, survives a Ctrl-C during the create
// (it goes on there; the start after it, and every later one, still sends the secret read here)
// and a killed connection mid-exec (the instance goes on, the next command reconnects and
// forwards the preview again), stops it and starts it again (the secret read here again), and
// shows both machines' ledgers in one audit (the laptop's holds the model's call it refused and
// never sent) and checks both chains (a changed laptop entry is named). Then the work comes home with apply, and the
// laptop's dashboard, in a real headless Chromium, shows the instance there: its preview link opens
// here, a guest's request for a new host waits there for the page's Allow once, and its Stop
// button stops it there. One boot and one start for the file.
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { join } from "node:path";
import { promisify } from "node:util";
import { chromium } from "playwright-core";
import { runCli } from "./support/cli-run.js";
import { chromiumPath, testImage } from "./support/vm-suite.js";
import { CLI, sshRemote, type SshRemote } from "@pi-sandbox/controller/testing";
import { callAction } from "@pi-sandbox/controller/client";

const run = promisify(execFile);

let dir: string;
let remote: SshRemote;
const SECRET = "s3cret-from-the-laptop";

beforeAll(async () => {
  dir = await mkdtemp("/tmp/psx-");
  remote = await sshRemote(dir, testImage());
  await writeFile(join(dir, "token.txt"), `${SECRET}\n`);
  await writeFile(
    join(dir, "sandbox.yaml"),
    [
      "version: 1",
      `image: ${remote.remoteImage}`,
      "profile: tiny",
      "diskGiB: 4",
      "network:",
      "  allowedHosts: [example.com]",
      "  secrets:",
      "    TOKEN:",
      "      from: file:./token.txt",
      "      hosts: [example.com]",
      "setup:",
      "  - printf 'Hello from the guest\\n' > /workspace/index.html",
      "services:",
      "  web:",
      "    command: python3 -m http.server $PORT --bind 127.0.0.1",
      "    health: /",
      "    preview: true",
      "",
    ].join("\n"),
  );
  await writeFile(
    join(dir, "mount.yaml"),
    `version: 1\nimage: ${remote.remoteImage}\nmounts:\n  - host: ./\n    guest: /mnt/here\n`,
  );
}, 120_000);

afterAll(async () => {
  await cli(["destroy", "-f", "demo"]).catch(() => undefined);
  await remote?.close();
  await rm(dir, { recursive: true, force: true });
}, 120_000);

/** `pi-sandbox args…` on the laptop side, in `dir`, through the context in use. */
const cli = (args: string[], input?: string) => runCli(args, { cwd: dir, env: remote.env, input, timeoutMs: 300_000 });

/**
 * A CLI that keeps running: wait for its output, press Ctrl-C, read how it ended. It runs in a
 * process group of its own, and `interrupt` signals that whole group, as a terminal's Ctrl-C
 * does: the CLI and any child of it still in its group (an ssh there would end at once).
 */
function follow(args: string[]) {
  const child = spawn(process.execPath, [CLI, ...args], { cwd: dir, env: remote.env, detached: true });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
  return {
    child,
    exited,
    interrupt: () => process.kill(-child.pid!, "SIGINT"),
    stderr: () => stderr,
    /** Waits for `text` on stdout (or stderr, where progress goes). */
    async saw(text: string, on: "stdout" | "stderr" = "stdout") {
      while (!(on === "stdout" ? stdout : stderr).includes(text)) {
        if (child.exitCode !== null) throw new Error(`pi-sandbox ${args.join(" ")} ended: ${stderr}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
  };
}

async function ok(args: string[], input?: string): Promise<string> {
  const done = await cli(args, input);
  if (done.code !== 0) throw new Error(`pi-sandbox ${args.join(" ")} exited ${done.code}:\n${done.stderr}`);
  return done.stdout;
}

/** A GET of `url` (with another `Host` header when given; fetch would not send one), "status body". */
function get(url: string, host?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: host ? { host } : {}, timeout: 30_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (c: string) => (body += c));
      res.on("end", () => resolve(`${res.statusCode} ${body}`));
    });
    req.once("error", reject);
    req.end();
  });
}

test("create, exec, cp, preview, a killed connection and stop, all through a context", async () => {
  await ok(["context", "add", "far", `ssh://${remote.host}`]);
  await ok(["context", "use", "far"]);
  expect(await ok(["context", "ls"])).toMatch(/^far \*\s+ssh:\/\/far$/m);

  // A mount of a directory here is refused before anything reaches the other machine.
  const mount = await cli(["create", "mounted", "-c", "mount.yaml"]);
  expect(mount.code).toBe(1);
  expect(mount.stderr).toMatch(/CONTROLLER_CONTEXT_REFUSED: .*mount\.yaml mounts a directory of this machine/);

  // Ctrl-C once the far side's controller has the create: the wait ends here, the create goes on
  // there, and the start after it waits for it (the secret's source was kept here before it went).
  const creating = follow(["create", "demo", "-c", "sandbox.yaml"]);
  await creating.saw("[disk]", "stderr");
  creating.interrupt();
  expect(await creating.exited).toBe(130);
  expect(creating.stderr()).toMatch(/interrupted: pi-sandbox stopped waiting, but create of demo goes on/);
  const created = await ok(["start", "demo"]);
  expect(created).toMatch(/^state:\s+running$/m);
  expect(created).toMatch(/^secret:\s+TOKEN → example\.com/m);
  const url = /^preview:\s+(http:\/\/(127(?:\.\d{1,3}){3}:\d+)\/)/m.exec(created);
  expect(url).not.toBeNull();
  // The preview answers here, at the address the far side printed; its Host guard still holds.
  expect(await get(url![1]!)).toBe("200 Hello from the guest\n");
  expect(await get(url![1]!, `evil.example:${url![2]!.split(":")[1]}`)).toMatch(/^4\d\d Refused: Host/);
  // The laptop's secret is in no file of the other account (state, logs, disks, temp).
  const { stdout: found } = await run("grep", ["-rlF", SECRET, remote.remoteDir]).catch((e: { stdout: string }) => e);
  expect(found).toBe("");

  expect(await ok(["exec", "demo", "--", "python3", "-c", "print(6*7)"])).toBe("42\n");
  expect((await cli(["exec", "demo", "--", "sh", "-c", "exit 3"])).code).toBe(3);

  await writeFile(join(dir, "up.txt"), "from the laptop\n");
  expect(await ok(["cp", "up.txt", "demo:/workspace/up.txt"])).toMatch(
    /^copied 1 file, 16 bytes to demo:\/workspace\/up\.txt$/m,
  );
  await ok(["exec", "demo", "--", "sh", "-c", "echo from the guest > /workspace/down.txt"]);
  await ok(["cp", "demo:/workspace/down.txt", "down.txt"]);
  expect(await readFile(join(dir, "down.txt"), "utf8")).toBe("from the guest\n");

  // exec -i: this stdin to the command there.
  expect(await ok(["exec", "-i", "demo", "--", "tr", "a-z", "A-Z"], "piped here\n")).toBe("PIPED HERE\n");

  // Ctrl-C ends the command there (exec-kill), and logs -f follows a log until Ctrl-C.
  const interrupted = follow(["exec", "demo", "--", "sh", "-c", "echo started; exec sleep 6061"]);
  await interrupted.saw("started");
  interrupted.interrupt();
  expect(await interrupted.exited).toBe(130);
  // pgrep exits 1 when nothing matches; the bracket keeps it from matching its own shell. On a
  // failure the guest's process list says what was left.
  const left = await cli([
    "exec",
    "demo",
    "--",
    "sh",
    "-c",
    "pgrep -f 'sleep 606[1]' || exit 1; ps -eo pid,pgid,stat,args",
  ]);
  expect(left.stdout).toBe("");
  expect(left.code).toBe(1);
  const logs = follow(["logs", "demo", "web", "-f", "-n", "1"]);
  await logs.saw("GET /");
  await get(`${url![1]!}followed`);
  await logs.saw("GET /followed");
  logs.interrupt();
  expect(await logs.exited).toBe(130);

  // The connection dies under a running exec: a clear error, the instance goes on.
  const cut = follow(["exec", "demo", "--", "sh", "-c", "echo started; sleep 30"]);
  await cut.saw("started");
  const master = await remote.masterPid();
  expect(master).toBeGreaterThan(0);
  process.kill(master!, "SIGKILL");
  expect(await cut.exited).toBe(125);
  expect(cut.stderr()).toMatch(/CONTROLLER_CONTEXT_LOST: the connection to context far was lost/);
  expect(cut.stderr()).toMatch(/goes on/);
  // The next command reconnects; the preview is forwarded again.
  expect(await ok(["ls"])).toMatch(/^demo\s+running\b/m);
  expect(await get(url![1]!)).toBe("200 Hello from the guest\n");

  expect(await ok(["stop", "demo"])).toMatch(/^state:\s+stopped$/m);
  expect(await ok(["ls"])).toMatch(/^demo\s+stopped\b/m);
  // A start reads the secret here again (its controller there got it from the create's call only).
  expect(await ok(["start", "demo"])).toMatch(/^state:\s+running$/m);
  expect(await get(url![1]!)).toBe("200 Hello from the guest\n");
  // And the local context is this machine, which has no such instance.
  expect(await ok(["ls", "--context", "local"])).not.toMatch(/demo/);

  // A model (Pi's tool on the laptop) through the context: its exec runs there as the model's; its
  // upload of a file outside its project, which the user declines here, never leaves the laptop.
  const project = join(dir, "project");
  await mkdir(project, { recursive: true });
  const asModel = { env: remote.env, cwd: project, caller: "model" as const, context: "far" };
  await callAction({ action: "exec", name: "demo", cmd: "true" }, asModel);
  await expect(
    callAction(
      { action: "upload", name: "demo", from: join(dir, "up.txt"), to: "/workspace/model.txt" },
      { ...asModel, confirm: async () => false },
    ),
  ).rejects.toMatchObject({ code: "CONTROLLER_USER_DECLINED" });
  const audit = await ok(["audit", "demo", "-n", "500"]);
  // Each machine's entries, labelled: what the laptop sent (and refused), what ran there.
  expect(audit).toMatch(/^here +\d+ .* action +create of demo by cli through context far: interrupted /m);
  expect(audit).toMatch(/^far +\d+ .* action +create by cli via context from \S+@\S+: ok /m);
  expect(audit).toMatch(/^here +\d+ .* action +start of demo by cli through context far: ok /m);
  expect(audit).toMatch(/^here +\d+ .* action +exec of demo by model through context far: ok /m);
  expect(audit).toMatch(/^far +\d+ .* action +exec by model via context from \S+@\S+: ok /m);
  expect(audit).toMatch(/^here +\d+ .* trust +no to upload through context far, answered by the user, in Pi's dialog/m);
  expect(audit).toMatch(
    /^here +\d+ .* action +upload of demo by model through context far: CONTROLLER_USER_DECLINED /m,
  );
  expect(audit).not.toMatch(/^far .* upload by model/m);
  expect(audit).not.toContain(SECRET);

  // Both chains hold; a changed entry of the laptop's is named.
  const verified = await ok(["audit", "verify", "demo"]);
  expect(verified).toMatch(/^the ledger of demo on context far holds: \d+ entries/m);
  expect(verified).toMatch(/^this machine's ledger of context far holds: \d+ entries in 1 file\(s\)/m);
  const ledgerFile = join(dir, "state", "contexts", "far", "ledger", "ledger-000001.jsonl");
  const kept = await readFile(ledgerFile, "utf8");
  await writeFile(ledgerFile, kept.replace('"outcome":"CONTROLLER_USER_DECLINED"', '"outcome":"ok"'));
  const broken = await cli(["audit", "verify", "demo"]);
  expect(broken.code).toBe(1);
  expect(broken.stderr).toMatch(
    /CONTROLLER_LEDGER_BROKEN: this machine's ledger of context far is broken at ledger-000001\.jsonl line \d+ \(entry \d+\): its content does not match its hash/,
  );
  await writeFile(ledgerFile, kept);
});

test("apply brings the work home; the laptop's dashboard opens the preview, answers an egress ask and stops the instance there", async () => {
  // apply through the context: the patch comes from there, the files are written here.
  await ok(["exec", "demo", "--", "sh", "-c", "echo made there > /workspace/made.txt"]);
  const home = join(dir, "home");
  await mkdir(home);
  expect(await ok(["apply", "demo", "--to", home])).toMatch(/^applied demo's changes since .* \(git apply\)$/m);
  expect(await readFile(join(home, "made.txt"), "utf8")).toBe("made there\n");

  // dashboard through the context: this machine's dashboard, opened at the context's group.
  const opened = await ok(["dashboard"]);
  const link = /^(http:\/\/127\.0\.0\.1:\d+\/\?token=\S+#context-far)$/m.exec(opened);
  expect(link).not.toBeNull();
  const preview = /^preview:\s+(http:\/\/\S+)/m.exec(await ok(["inspect", "demo"]))![1]!;
  const browser = await chromium.launch({ executablePath: await chromiumPath(), args: ["--no-sandbox"] });
  try {
    const page = await browser.newPage();
    await page.goto(link![1]!);
    const row = page.locator('#context-far tr[data-name="demo"]');
    await row.locator(".state-running").waitFor({ timeout: 30_000 });
    // Its preview link is the address forwarded here; the page it opens is the guest's.
    const anchor = row.locator(".previews a");
    expect(await anchor.getAttribute("href")).toBe(preview);
    const [tab] = await Promise.all([page.context().waitForEvent("page"), anchor.click()]);
    await tab.waitForLoadState();
    expect(await tab.textContent("body")).toBe("Hello from the guest\n");
    await tab.close();
    // A guest request for a host off allowedHosts waits there for this page's answer (the page is
    // an answerer there while it listens); Allow once lets it out (the name never resolves: 400).
    const request = "curl -s -o /dev/null -w '%{http_code}' --max-time 90 http://approve-me.invalid/";
    const curl = follow(["exec", "demo", "--", "sh", "-c", request]);
    await page
      .locator("#egress-asks", { hasText: "demo on far wants to reach approve-me.invalid:80 (HTTP GET)" })
      .waitFor({ timeout: 30_000 });
    await page.getByRole("button", { name: "Allow once: demo on far to approve-me.invalid" }).click();
    expect(await curl.exited).toBe(0);
    await curl.saw("400");
    await page.locator("#egress").waitFor({ state: "hidden", timeout: 30_000 });
    // Stop from the page: the instance there stops, and its row says so.
    await row.getByRole("button", { name: "Stop demo on far" }).click();
    await row.locator(".state-stopped").waitFor({ timeout: 120_000 });
    expect(await ok(["ls"])).toMatch(/^demo\s+stopped\b/m);
  } finally {
    await browser.close();
    await cli(["dashboard", "--stop"]);
  }
});

test("image import, list and rm through the context: a directory of the laptop becomes an image there", async () => {
  // A small assets directory (its files checked against the manifest's sums, never booted).
  const assets = join(dir, "assets");
  await mkdir(assets);
  const files = { kernel: "vmlinuz-virt", initramfs: "initramfs.cpio.lz4", rootfs: "rootfs.ext4" };
  const checksums: Record<string, string> = {};
  for (const [role, file] of Object.entries(files)) {
    await writeFile(join(assets, file), `${role} of the laptop\n`);
    checksums[role] = createHash("sha256").update(`${role} of the laptop\n`).digest("hex");
  }
  await writeFile(
    join(assets, "manifest.json"),
    JSON.stringify({ version: 1, buildId: "laptop-made", assets: files, checksums }),
  );
  expect(await ok(["image", "import", "assets", "from-laptop"])).toMatch(/^imported image from-laptop \(\w+\): \/\S+/m);
  expect(await ok(["image", "list"])).toMatch(/^from-laptop\s/m);
  expect(await ok(["image", "rm", "from-laptop"])).toMatch(/^removed from-laptop$/m);
});
