// A second machine for context tests and benchmarks, on this one: a Unix account with a pi-sandbox of its own
// (this checkout's build, its own state root, temp dir and a hard-linked copy of the test image),
// reached over a real sshd with a key-only login. The sshd runs in inetd mode (`sshd -i`) inside
// a network namespace of its own, started by ssh's ProxyCommand, so the account's loopback is
// not this one's: a preview forwarded to the same address and port here does not collide with
// the listener there, as on two machines. Needs root (useradd, netns) and Debian's
// openssh-server (scripts/install-system-deps.sh).
import { execFile } from "node:child_process";
import { chmod, chown, link, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";

const run = promisify(execFile);

/** The account that plays the other machine. */
export const REMOTE_USER = "pisb-remote";

/** The built CLI of this checkout, which both sides run (from the sources too: tests import them). */
export const CLI = fileURLToPath(
  new URL(import.meta.url.endsWith(".ts") ? "../dist/cli/main.js" : "./cli/main.js", import.meta.url),
);

export interface SshRemote {
  /** Host alias of the ssh config (`ssh://far`). */
  host: string;
  /** The account's own directory for this run: its state root is `state/` under it. */
  remoteDir: string;
  /** Where the image is there, for `image:`. */
  remoteImage: string;
  /** Environment of the laptop's pi-sandbox: its own config and runtime dirs, the ssh and scp wrappers. */
  env: NodeJS.ProcessEnv;
  /** The ssh master's pid (undefined when none runs). */
  masterPid(): Promise<number | undefined>;
  /** Runs a command as the account over ssh. */
  ssh(command: string): Promise<string>;
  /** Ends the master and removes what the run made (the account stays, for the next run). */
  close(): Promise<void>;
}

/** The comment that ends each run's line in the account's authorized_keys, before its pid. */
const RUN_TAG = "pisb-run-";

/** True for a line of authorized_keys that is not a run's, or is a live run's. */
function liveRun(line: string): boolean {
  const pid = Number(new RegExp(`${RUN_TAG}(\\d+)$`).exec(line)?.[1]);
  if (!pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Rewrites the account's authorized_keys (0600) through `change`. */
async function rewriteKeys(file: string, change: (lines: string[]) => string[]): Promise<void> {
  const lines = (await readFile(file, "utf8").catch(() => "")).split("\n").filter((line) => line.trim().length > 0);
  await writeFile(file, `${change(lines).join("\n")}\n`, { mode: 0o600 });
}

async function ensureAccount(): Promise<string> {
  try {
    await run("id", [REMOTE_USER]);
  } catch {
    await run("useradd", ["--create-home", "--shell", "/bin/sh", REMOTE_USER]);
  }
  // Not locked (sshd refuses a locked account), and no password: the key is the only way in.
  await run("usermod", ["-p", "*", REMOTE_USER]);
  const { stdout } = await run("getent", ["passwd", REMOTE_USER]);
  return stdout.trim().split(":")[5]!;
}

/** Sets up the account, keys, sshd config and namespace under `dir` (the laptop's side). */
export async function sshRemote(dir: string, testImage: string): Promise<SshRemote> {
  if (process.getuid?.() !== 0)
    throw new Error("the context test needs root: it adds a Unix account and a network namespace");
  const home = await ensureAccount();
  const { stdout: ids } = await run("id", ["-u", REMOTE_USER]);
  const { stdout: gids } = await run("id", ["-g", REMOTE_USER]);
  const [uid, gid] = [Number(ids.trim()), Number(gids.trim())];
  const tag = `${process.pid}`;
  const remoteDir = join(home, `run-${tag}`);
  const owned = async (path: string, mode = 0o700) => {
    await mkdir(path, { recursive: true, mode });
    await chown(path, uid, gid);
    await chmod(path, mode);
  };
  await owned(join(home, ".ssh"));
  for (const sub of ["", "bin", "tmp", "cache", "image"])
    await owned(join(remoteDir, sub), sub === "image" ? 0o755 : 0o700);
  // The image by hard links: the files stay root's and read-only to the account, nothing is copied.
  const remoteImage = join(remoteDir, "image");
  for (const file of await readdir(testImage)) await link(join(testImage, file), join(remoteImage, file));
  const wrapper = join(remoteDir, "bin", "pi-sandbox");
  await writeFile(wrapper, `#!/bin/sh\nexec ${process.execPath} ${CLI} "$@"\n`, { mode: 0o755 });
  await chown(wrapper, uid, gid);

  await run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(dir, "host_key")]);
  await run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(dir, "id")]);
  const { stdout: pub } = await run("cat", [join(dir, "id.pub")]);
  // The account's pi-sandbox on its PATH, its state and temp dirs: what a login profile would set.
  const environment = [
    `PATH=${join(remoteDir, "bin")}:/usr/local/bin:/usr/bin:/bin`,
    `PI_SANDBOX_HOME=${join(remoteDir, "state")}`,
    `TMPDIR=${join(remoteDir, "tmp")}`,
    `XDG_CACHE_HOME=${join(remoteDir, "cache")}`,
  ]
    .map((pair) => `environment="${pair}"`)
    .join(",");
  // One line per run, tagged with its pid: runs side by side (two engineers' tests on one machine)
  // each keep their own key and environment; lines of runs that are gone are dropped.
  const keys = join(home, ".ssh", "authorized_keys");
  const [type, key] = pub.trim().split(/\s+/);
  await rewriteKeys(keys, (lines) => [...lines.filter(liveRun), `${environment} ${type} ${key} ${RUN_TAG}${tag}`]);
  await chown(keys, uid, gid);

  const netns = `pisb-ctx-${tag}`;
  await run("ip", ["netns", "add", netns]);
  await run("ip", ["netns", "exec", netns, "ip", "link", "set", "lo", "up"]);
  await mkdir("/run/sshd", { recursive: true, mode: 0o755 });
  const sshdConfig = join(dir, "sshd_config");
  await writeFile(
    sshdConfig,
    [
      `HostKey ${join(dir, "host_key")}`,
      "PasswordAuthentication no",
      "KbdInteractiveAuthentication no",
      "PubkeyAuthentication yes",
      "PermitRootLogin no",
      `AllowUsers ${REMOTE_USER}`,
      "PermitUserEnvironment PATH,PI_SANDBOX_HOME,TMPDIR,XDG_CACHE_HOME",
      "UsePAM no",
      "Subsystem sftp /usr/lib/openssh/sftp-server",
      "LogLevel ERROR",
      "",
    ].join("\n"),
  );
  const host = "far";
  const sshConfig = join(dir, "ssh_config");
  await writeFile(
    sshConfig,
    [
      `Host ${host}`,
      `  User ${REMOTE_USER}`,
      `  IdentityFile ${join(dir, "id")}`,
      "  IdentitiesOnly yes",
      `  UserKnownHostsFile ${join(dir, "known_hosts")}`,
      "  StrictHostKeyChecking accept-new",
      "  BatchMode yes",
      `  ProxyCommand ip netns exec ${netns} /usr/sbin/sshd -i -f ${sshdConfig}`,
      "",
    ].join("\n"),
  );
  // The laptop user's "own ssh config" is this file: ssh and scp are pointed at it.
  for (const program of ["ssh", "scp"]) {
    await writeFile(join(dir, program), `#!/bin/sh\nexec ${program} -F ${sshConfig} "$@"\n`, { mode: 0o755 });
  }
  const runtime = join(dir, "run");
  await mkdir(runtime, { mode: 0o700 });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    XDG_CONFIG_HOME: join(dir, "config"),
    XDG_RUNTIME_DIR: runtime,
    PI_SANDBOX_HOME: join(dir, "state"),
    PI_SANDBOX_SSH: join(dir, "ssh"),
    PI_SANDBOX_SCP: join(dir, "scp"),
  };
  delete env.PI_SANDBOX_CONTEXT;
  const control = ["-o", `ControlPath=${join(runtime, "pi-sandbox-ssh", "%C")}`];
  const remote: SshRemote = {
    host,
    remoteDir,
    remoteImage,
    env,
    async masterPid() {
      try {
        const { stderr } = await run(join(dir, "ssh"), [...control, "-O", "check", host]);
        return Number(/pid=(\d+)/.exec(stderr)?.[1]);
      } catch {
        return undefined;
      }
    },
    async ssh(command) {
      return (await run(join(dir, "ssh"), [host, command], { env })).stdout;
    },
    async close() {
      await run(join(dir, "ssh"), [...control, "-O", "exit", host]).catch(() => undefined);
      await run("ip", ["netns", "del", netns]).catch(() => undefined);
      await rewriteKeys(keys, (lines) => lines.filter((line) => !line.endsWith(` ${RUN_TAG}${tag}`)));
      await rm(remoteDir, { recursive: true, force: true });
    },
  };
  // The account runs this checkout's build and Node: both must be readable by other users.
  try {
    await remote.ssh("pi-sandbox --version");
  } catch (error) {
    await remote.close();
    throw new Error(
      `${REMOTE_USER} cannot run ${CLI} with ${process.execPath} over ssh (the checkout and Node must be readable by other users): ${(error as Error).message}`,
    );
  }
  return remote;
}
