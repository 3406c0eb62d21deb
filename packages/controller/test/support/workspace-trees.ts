// Helpers of the diff/apply tests: the workspace a create leaves and the changes made to it, a
// workspace tree read as what a patch carries (each file's bytes and exec bit, each symlink's
// target) on the host or in a guest, a host "supervisor" that runs the store program in host
// processes, and a shell script run in a directory.
import { execFileSync, spawnSync } from "node:child_process";
import { lstat, readFile, readdir, readlink } from "node:fs/promises";
import { join } from "node:path";
import type { SupervisorClient } from "@pi-sandbox/supervisor";

/** The workspace a create leaves (setup writes it), run in the guest and in host copies alike. */
export const INITIAL = String.raw`
printf 'one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\ntwelve\n' > text.txt
printf 'keep me\n' > keep.txt
printf 'a file to be renamed, long enough to be found again\nline 2\nline 3\nline 4\n' > old-name.txt
printf 'delete me\n' > gone.txt
printf '#!/bin/sh\necho hi\n' > run.sh
mkdir -p src && printf 'export const a = 1;\n' > src/a.ts
printf '\000\001\002' > data.bin
printf '{"name":"demo","scripts":{"test":"true"}}\n' > package.json
`;

/** What the guest changes: every kind of change a patch carries. */
export const CHANGES = String.raw`
printf 'one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\ntwelve\nthirteen\n' > text.txt
mv old-name.txt new-name.txt && printf 'line 5\n' >> new-name.txt
rm gone.txt
chmod +x run.sh
printf '\000\001\003\004' > data.bin
printf '\211PNG\r\n\032\n' > image.png
printf 'esc \033[31mred\033[0m\n' > ansi.txt
printf 'crlf\r\nline\r\n' > crlf.txt
printf 'unicode\n' > 'spaced name ü.txt'
ln -s src/a.ts link-to-a
mkdir -p node_modules/x && printf 'junk\n' > node_modules/x/i.js
printf '*.log\n' > .gitignore && printf 'ignored\n' > debug.log
`;

/** What a patch leaves out of a workspace: the guest's config copy, node_modules, ignored files. */
export const NOT_IN_PATCH = [".sandbox.yaml", "node_modules", "debug.log", ".git"];

/** One entry of a tree: a file's content (base64) and exec bit, or a symlink's target. */
export type TreeEntry = { file: string; exec: boolean } | { link: string };

/** Every file and symlink under `dir` by relative path, leaving out names in `skip` at any depth. */
export async function readTree(dir: string, skip: readonly string[] = []): Promise<Record<string, TreeEntry>> {
  const out: Record<string, TreeEntry> = {};
  async function walk(rel: string): Promise<void> {
    for (const name of (await readdir(join(dir, rel))).sort()) {
      if (skip.includes(name)) continue;
      const path = rel ? `${rel}/${name}` : name;
      const st = await lstat(join(dir, path));
      if (st.isSymbolicLink()) out[path] = { link: await readlink(join(dir, path)) };
      else if (st.isDirectory()) await walk(path);
      else out[path] = { file: (await readFile(join(dir, path))).toString("base64"), exec: (st.mode & 0o100) !== 0 };
    }
  }
  await walk("");
  return out;
}

/** Runs `script` with sh in `cwd`; throws with its output when it fails. */
export function sh(cwd: string, script: string, env: NodeJS.ProcessEnv = process.env): string {
  return execFileSync("sh", ["-c", script], { cwd, env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/**
 * A supervisor whose "guest" is this host: `exec` runs the command with sh (PATH as given), the
 * agent's state directory is `<root>/var/lib/pi-sandbox-agent`. Enough for the workspace store.
 */
export function hostSupervisor(
  root: string,
  workspace: string,
  env: NodeJS.ProcessEnv = process.env,
): SupervisorClient {
  const fake = {
    hello: { stateDir: join(root, "var/lib/pi-sandbox-agent") },
    workspace,
    async exec(command: string) {
      const run = spawnSync("/bin/sh", ["-c", command], { cwd: "/", env, encoding: "utf8" });
      return {
        handle: "host",
        running: false,
        exitCode: run.status ?? 1,
        output: run.stdout,
        stderr: run.stderr,
        truncatedBytes: 0,
      };
    },
  };
  return fake as unknown as SupervisorClient;
}

/**
 * A Python program printing the tree of the directory in argv[1] as {@link readTree} reads it
 * (JSON), leaving out the names in argv[2] (comma-separated): for a real guest's workspace.
 */
export const READ_TREE_PY = String.raw`
import base64, json, os, stat, sys
root, skip, out = sys.argv[1], set(sys.argv[2].split(",")), {}
def walk(rel):
    for name in sorted(os.listdir(os.path.join(root, rel))):
        if name in skip:
            continue
        path = rel + "/" + name if rel else name
        full = os.path.join(root, path)
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode):
            out[path] = {"link": os.readlink(full)}
        elif stat.S_ISDIR(st.st_mode):
            walk(path)
        else:
            out[path] = {"file": base64.b64encode(open(full, "rb").read()).decode(), "exec": bool(st.st_mode & 0o100)}
walk("")
print(json.dumps(out))
`;
