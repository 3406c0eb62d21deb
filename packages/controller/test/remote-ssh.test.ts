// The ssh command lines of a context: the shared master (ControlMaster, a ControlPath of ssh's
// hash under the private directory, ControlPersist), the user and port as options, and the host
// after `--`, so nothing in it is read as an option. The directory is made private and one that
// is not is refused.
import { chmod, mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseSshUrl } from "../src/state/contexts.js";
import { controlDir, ensureControlDir, sshArgs } from "../src/remote/ssh.js";

let base: string;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "ssh-"));
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

test("one master per destination, the user's own config left to apply, the host after --", () => {
  const args = sshArgs(parseSshUrl("ssh://me@big.lan:2222"), "/run/x", ["-T"]);
  expect(args).toEqual([
    "-o",
    "ControlMaster=auto",
    "-o",
    "ControlPath=/run/x/%C",
    "-o",
    "ControlPersist=10m",
    "-o",
    "ServerAliveInterval=15",
    "-o",
    "ServerAliveCountMax=3",
    "-p",
    "2222",
    "-l",
    "me",
    "-T",
    "--",
    "big.lan",
  ]);
  // No -F: ~/.ssh/config applies; a Host alias is a host.
  expect(sshArgs(parseSshUrl("ssh://buildbox"), "/run/x")).not.toContain("-F");
});

test("the control directory is made private, and one that others can write is refused", async () => {
  const env = { XDG_RUNTIME_DIR: join(base, "run") };
  expect(await ensureControlDir(env)).toBe(controlDir(env));
  const open = { XDG_RUNTIME_DIR: join(base, "open") };
  await mkdir(controlDir(open), { recursive: true });
  await chmod(controlDir(open), 0o777);
  await expect(ensureControlDir(open)).rejects.toMatchObject({ code: "CONTROLLER_STATE_INSECURE" });
});
