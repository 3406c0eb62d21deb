// Guest files through the real agent as a host process: text and binary round trips, checksummed
// atomic writes, size limits with typed errors, and file work that never waits behind services.
import { randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, stat, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { listDir, startLocal, type LocalSupervisor } from "./support/local.js";

let sup: LocalSupervisor;
beforeAll(async () => {
  sup = await startLocal();
});
afterAll(async () => {
  await sup?.close();
});

test("a small text file round-trips and is written atomically with the checksum verified", async () => {
  const path = join(sup.workspace, "hello.txt");
  const written = await sup.client.writeFile(path, "héllo\n");
  expect(written).toMatchObject({ path, sizeBytes: 7 });
  expect(written.sha256).toMatch(/^[0-9a-f]{64}$/);
  expect(await readFile(path, "utf8")).toBe("héllo\n");
  expect(await sup.client.readText(path)).toEqual({ content: "héllo\n", truncated: false, sizeBytes: 7 });
  // No temp files are left next to the target.
  expect((await listDir(sup.workspace)).filter((name) => name.includes(".part"))).toEqual([]);
});

test("binary files larger than one chunk travel in chunks and come back byte for byte", async () => {
  const path = join(sup.workspace, "blob.bin");
  const data = randomBytes(900 * 1024);
  await sup.client.writeFile(path, data, { maxBytes: 4 * 1024 * 1024 });
  expect((await readFile(path)).equals(data)).toBe(true);
  const back = await sup.client.readFile(path);
  expect(back.equals(data)).toBe(true);
});

test("writes over 1 MiB are refused by default, before anything is sent", async () => {
  const path = join(sup.workspace, "too-big.bin");
  await expect(sup.client.writeFile(path, Buffer.alloc(1024 * 1024 + 1))).rejects.toMatchObject({
    code: "FILE_TOO_LARGE",
  });
  expect(await listDir(sup.workspace)).not.toContain("too-big.bin");
});

test("text reads stop at 64 KiB with the truncation marked", async () => {
  const path = join(sup.workspace, "long.txt");
  await writeFile(path, "a".repeat(100_000) + "END");
  const read = await sup.client.readText(path);
  expect(read.truncated).toBe(true);
  expect(read.sizeBytes).toBe(100_003);
  expect(Buffer.byteLength(read.content)).toBeLessThanOrEqual(64 * 1024);
  expect(read.content).toContain("file is 100003 bytes");
  expect(read.content).not.toContain("END");
});

test("an exact read of a file over maxBytes is a typed error", async () => {
  const path = join(sup.workspace, "medium.bin");
  await writeFile(path, Buffer.alloc(5000));
  await expect(sup.client.readFile(path, { maxBytes: 4096 })).rejects.toMatchObject({ code: "FILE_TOO_LARGE" });
});

test("missing files, missing parents and directories give typed errors", async () => {
  await expect(sup.client.readText(join(sup.workspace, "nope.txt"))).rejects.toMatchObject({ code: "FILE_NOT_FOUND" });
  await expect(sup.client.writeFile(join(sup.workspace, "no/such/dir/f.txt"), "x")).rejects.toMatchObject({
    code: "FILE_PARENT_MISSING",
  });
  await expect(sup.client.readText(sup.workspace)).rejects.toMatchObject({ code: "FILE_IS_DIRECTORY" });
  await expect(sup.client.writeFile("relative.txt", "x")).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
  const created = join(sup.workspace, "made/on/demand.txt");
  await sup.client.writeFile(created, "ok", { createParents: true });
  expect(await readFile(created, "utf8")).toBe("ok");
});

test("overwriting keeps the file's mode unless a mode is given", async () => {
  const path = join(sup.workspace, "script.sh");
  await writeFile(path, "#!/bin/sh\n");
  await chmod(path, 0o755);
  await sup.client.writeFile(path, "#!/bin/sh\necho hi\n");
  expect((await stat(path)).mode & 0o777).toBe(0o755);
  await sup.client.writeFile(path, "x", { mode: 0o600 });
  expect((await stat(path)).mode & 0o777).toBe(0o600);
});

test("file writes and reads go through while a service and a 60 s command run", async () => {
  await mkdir(join(sup.workspace, "srv"), { recursive: true });
  await sup.writeYaml(
    [
      "version: 1",
      "services:",
      "  web:",
      "    command: python3 -m http.server $PORT --bind 127.0.0.1",
      "    cwd: srv",
      "    health: /",
    ].join("\n"),
  );
  const ensured = await sup.client.ensureServices();
  expect(ensured.failures).toEqual([]);
  const long = await sup.client.exec("sleep 60", { timeoutMs: 0 });
  expect(long.running).toBe(true);
  const t0 = Date.now();
  const path = join(sup.workspace, "srv", "during.txt");
  const data = randomBytes(600 * 1024);
  await sup.client.writeFile(path, data, { maxBytes: 1024 * 1024 });
  const back = await sup.client.readFile(path);
  expect(back.equals(data)).toBe(true);
  expect(Date.now() - t0).toBeLessThan(5_000);
  const status = await sup.client.execStatus(long.handle, { timeoutMs: 0 });
  expect(status.running).toBe(true);
  const [web] = await sup.client.serviceStatus(["web"]);
  expect(web).toMatchObject({ state: "running", readiness: { state: "ready" } });
  await sup.client.execKill(long.handle);
  await sup.client.stopServices();
});

test("files: streamed writes and reads, stat, mkdir and a tree listing that never follows links", async () => {
  const files = sup.client.files;
  const dir = join(sup.workspace, "tree");
  await files.mkdir(join(dir, "a", "b"), { mode: 0o750 });
  // The last directory gets the mode; its missing parents the default.
  expect(await files.stat(join(dir, "a", "b"))).toEqual({ type: "directory", size: 0, mode: 0o750 });
  const data = randomBytes(700 * 1024);
  const pieces: number[] = [];
  const written = await files.writeFrom(
    join(dir, "a", "b", "blob.bin"),
    {
      size: data.length,
      sha256: (await import("node:crypto")).createHash("sha256").update(data).digest("hex"),
      read: (offset, length) => data.subarray(offset, offset + length),
      onProgress: (done) => pieces.push(done),
    },
    { mode: 0o640 },
  );
  expect(written.sizeBytes).toBe(data.length);
  expect(pieces.at(-1)).toBe(data.length);
  await symlink("/etc", join(dir, "out"));
  const tree = await files.list(dir);
  expect(tree).toEqual({
    entries: [
      { path: "a", type: "directory", size: 0, mode: expect.any(Number) },
      { path: "out", type: "symlink", size: 0, mode: expect.any(Number) },
      { path: "a/b", type: "directory", size: 0, mode: 0o750 },
      { path: "a/b/blob.bin", type: "file", size: data.length, mode: 0o640 },
    ],
    truncated: false,
    skippedNames: 0,
  });
  expect((await files.list(dir, { maxEntries: 2 })).truncated).toBe(true);
  expect(await files.stat(join(dir, "out"))).toMatchObject({ type: "symlink", target: "directory" });
  const got: Buffer[] = [];
  const read = await files.readTo(join(dir, "a", "b", "blob.bin"), { write: (piece) => void got.push(piece) });
  expect(Buffer.concat(got).equals(data)).toBe(true);
  expect(read).toEqual({ size: data.length, sha256: written.sha256 });
  await expect(files.list(join(dir, "a", "b", "blob.bin"))).rejects.toMatchObject({ code: "FILE_NOT_DIRECTORY" });
  await expect(files.stat(join(dir, "nope"))).rejects.toMatchObject({ code: "FILE_NOT_FOUND" });
});

test("a large file still goes in and out when the guest's loopback refuses its transfer stream", async () => {
  // The agent's door is let through; any other port (a transfer's stream) is refused, as by a
  // guest whose loopback is down or firewalled.
  let door: number | undefined;
  const refusing = await startLocal({ portMap: (port) => (door === undefined || port === door ? port : 1) });
  try {
    door = refusing.client.hello.door?.port ?? -1;
    const files = refusing.client.files;
    const data = randomBytes(600 * 1024);
    const path = join(refusing.workspace, "big.bin");
    const sha256 = (await import("node:crypto")).createHash("sha256").update(data).digest("hex");
    const written = await files.writeFrom(path, { size: data.length, sha256, read: (o, n) => data.subarray(o, o + n) });
    expect(written).toEqual({ path, sizeBytes: data.length, sha256 });
    expect((await readFile(path)).equals(data)).toBe(true);
    const got: Buffer[] = [];
    expect(await files.readTo(path, { write: (piece) => void got.push(piece) })).toEqual({ size: data.length, sha256 });
    expect(Buffer.concat(got).equals(data)).toBe(true);
  } finally {
    await refusing.close();
  }
});
