// The snapshot a refresh uploads: the checkout's tracked files with their edits and deletions
// (nothing untracked or ignored), symlinks kept, from git or jj, and the archive's checksum.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, symlink, unlink, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSnapshot, listWorkingFiles, sha256File } from "../src/snapshot.js";
import { makeFixtureRepo } from "./support/fixture.js";

let repo: string;
beforeEach(async () => {
  repo = await makeFixtureRepo();
});
afterEach(async () => {
  await rm(repo, { recursive: true, force: true });
});

function tarList(archive: string): string[] {
  return execFileSync("tar", ["-tzf", archive], { encoding: "utf8" }).split("\n").filter(Boolean).sort();
}

test("lists tracked files of a git checkout from any subdirectory", async () => {
  const listed = await listWorkingFiles(join(repo, "src"));
  expect(listed).toEqual({
    vcs: "git",
    root: repo,
    files: [
      ".gitignore",
      "build.js",
      "launch.js",
      "package-lock.json",
      "package.json",
      "packages/lister/build.js",
      "packages/lister/package.json",
      "packages/lister/src/index.js",
      "src/a.txt",
      "src/b.txt",
    ],
  });
});

test("edits and deletions are included, untracked and ignored files are not", async () => {
  await writeFile(join(repo, "src", "a.txt"), "edited\n");
  await unlink(join(repo, "src", "b.txt"));
  await writeFile(join(repo, "src", "new.txt"), "untracked\n");
  await mkdir(join(repo, "node_modules"));
  await writeFile(join(repo, "node_modules", "junk.js"), "ignored\n");
  await writeFile(join(repo, "staged.txt"), "staged\n");
  execFileSync("git", ["add", "staged.txt"], { cwd: repo });
  const snapshot = await createSnapshot(repo);
  try {
    expect(snapshot.files).not.toContain("src/b.txt");
    expect(tarList(snapshot.archivePath)).toEqual([
      ".gitignore",
      "build.js",
      "launch.js",
      "package-lock.json",
      "package.json",
      "packages/lister/build.js",
      "packages/lister/package.json",
      "packages/lister/src/index.js",
      "src/a.txt",
      "staged.txt",
    ]);
    const a = execFileSync("tar", ["-xzOf", snapshot.archivePath, "src/a.txt"], { encoding: "utf8" });
    expect(a).toBe("edited\n");
  } finally {
    await snapshot.close();
  }
  expect(existsSync(snapshot.archivePath)).toBe(false);
});

test("a tracked path replaced by a directory of untracked files adds nothing from it", async () => {
  await unlink(join(repo, "src", "b.txt"));
  await mkdir(join(repo, "src", "b.txt"));
  await writeFile(join(repo, "src", "b.txt", "secret"), "untracked\n");
  const snapshot = await createSnapshot(repo);
  try {
    expect(tarList(snapshot.archivePath).filter((p) => p.startsWith("src/b.txt"))).toEqual([]);
  } finally {
    await snapshot.close();
  }
});

test("tracked symlinks stay symlinks", async () => {
  await symlink("a.txt", join(repo, "src", "link"));
  execFileSync("git", ["add", "src/link"], { cwd: repo });
  const snapshot = await createSnapshot(repo);
  try {
    const listing = execFileSync("tar", ["-tvzf", snapshot.archivePath], { encoding: "utf8" });
    expect(listing).toMatch(/src\/link -> a\.txt/);
  } finally {
    await snapshot.close();
  }
});

test("the checksum is the archive's sha256", async () => {
  const snapshot = await createSnapshot(repo);
  try {
    const bytes = await readFile(snapshot.archivePath);
    expect(snapshot.sha256).toBe(createHash("sha256").update(bytes).digest("hex"));
    expect(snapshot.bytes).toBe(bytes.length);
    expect(await sha256File(snapshot.archivePath)).toBe(snapshot.sha256);
  } finally {
    await snapshot.close();
  }
});

test("a directory outside any checkout is REVIEW_SETUP_NOT_A_REPO", async () => {
  const outside = await mkdtemp(join(tmpdir(), "not-a-repo-"));
  try {
    await expect(listWorkingFiles(outside)).rejects.toMatchObject({
      code: "REVIEW_SETUP_NOT_A_REPO",
      hint: expect.stringContaining("--repo"),
    });
  } finally {
    await rm(outside, { recursive: true, force: true });
  }
});

test("a .jj workspace uses jj's working-revision listing when jj is on PATH, else git", async () => {
  await mkdir(join(repo, ".jj"));
  const bin = await mkdtemp(join(tmpdir(), "fake-jj-"));
  // A stand-in jj: lists what `jj file list` would for a working revision that added new.txt and
  // dropped b.txt (jj snapshots the working tree before answering).
  await writeFile(
    join(bin, "jj"),
    '#!/bin/sh\n[ "$1" = --version ] && exit 0\nprintf "src/a.txt\\nsrc/new.txt\\npackage.json\\n"\n',
    {
      mode: 0o755,
    },
  );
  await writeFile(join(repo, "src", "new.txt"), "new\n");
  try {
    expect(await listWorkingFiles(repo, { env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } })).toEqual({
      vcs: "jj",
      root: repo,
      files: ["package.json", "src/a.txt", "src/new.txt"],
    });
    const viaGit = await listWorkingFiles(repo, { env: { PATH: "/nonexistent" } }).catch((error: unknown) => error);
    // Without jj (and here without git either) the git path is taken and reports its failure.
    expect(viaGit).toMatchObject({ code: "REVIEW_SETUP_NOT_A_REPO", details: { vcs: "git" } });
  } finally {
    await rm(bin, { recursive: true, force: true });
  }
});
