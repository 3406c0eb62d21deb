// Port leases on disk and in memory: a preview keeps its host port across controller restarts, and
// a corrupt or unwritable lease file is an error naming the file, never silently new ports.
import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { isIngressError, JsonFilePortLeaseStore, MemoryPortLeaseStore } from "../src/index.js";
import { tempDir } from "./support/helpers.js";

let dir: string;
let remove: () => Promise<void>;

beforeEach(async () => {
  ({ dir, remove } = await tempDir());
});

afterEach(async () => {
  await remove();
});

describe("JsonFilePortLeaseStore", () => {
  test("a missing file reads as no leases; set writes a private versioned JSON file", async () => {
    const file = path.join(dir, "previews.json");
    const store = new JsonFilePortLeaseStore(file);
    expect(await store.get("web")).toBeUndefined();
    expect(await store.entries()).toEqual({});
    await store.set("web", 41231);
    expect(JSON.parse(await readFile(file, "utf8"))).toEqual({ version: 1, leases: { web: 41231 } });
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(await new JsonFilePortLeaseStore(file).get("web")).toBe(41231);
  });

  test("concurrent sets of different keys all survive; no temp files are left behind", async () => {
    const file = path.join(dir, "previews.json");
    const store = new JsonFilePortLeaseStore(file);
    await Promise.all(Array.from({ length: 20 }, (_, i) => store.set(`svc-${i}`, 40000 + i)));
    const expected = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`svc-${i}`, 40000 + i]));
    expect(await new JsonFilePortLeaseStore(file).entries()).toEqual(expected);
    expect(await readdir(dir)).toEqual(["previews.json"]);
  });

  test("delete forgets one key and keeps the others", async () => {
    const file = path.join(dir, "previews.json");
    const store = new JsonFilePortLeaseStore(file);
    await store.set("web", 41000);
    await store.set("api", 41001);
    await store.delete("web");
    await store.delete("never-there");
    expect(await new JsonFilePortLeaseStore(file).entries()).toEqual({ api: 41001 });
  });

  test("a corrupt file is an INGRESS_LEASE_STORE_FAILED error naming the file, never silently new ports", async () => {
    const file = path.join(dir, "previews.json");
    await writeFile(file, "{ not json");
    const error = await new JsonFilePortLeaseStore(file).get("web").catch((e: unknown) => e);
    expect(isIngressError(error)).toBe(true);
    expect(error).toMatchObject({ code: "INGRESS_LEASE_STORE_FAILED", details: { path: file } });
    expect((error as Error).message).toContain(file);
  });

  test("a file without a leases object is refused; entries that are not ports are dropped", async () => {
    const file = path.join(dir, "previews.json");
    await writeFile(file, JSON.stringify({ version: 1 }));
    await expect(new JsonFilePortLeaseStore(file).entries()).rejects.toMatchObject({
      code: "INGRESS_LEASE_STORE_FAILED",
    });
    await writeFile(file, JSON.stringify({ version: 1, leases: { web: 41000, bad: "x", zero: 0, big: 70000 } }));
    expect(await new JsonFilePortLeaseStore(file).entries()).toEqual({ web: 41000 });
  });

  test("a directory that does not exist fails the write with the path, and leaves no partial file", async () => {
    const file = path.join(dir, "missing", "previews.json");
    await expect(new JsonFilePortLeaseStore(file).set("web", 41000)).rejects.toMatchObject({
      code: "INGRESS_LEASE_STORE_FAILED",
      message: expect.stringContaining(file),
    });
    expect(await readdir(dir)).toEqual([]);
  });

  test("the previews' address is kept with the leases, across every later write", async () => {
    const file = path.join(dir, "ports.json");
    const store = new JsonFilePortLeaseStore(file);
    expect(await store.address()).toBeUndefined();
    await store.set("web", 41000);
    await store.setAddress("127.4.5.6");
    await store.set("api", 41001);
    await store.delete("web");
    expect(JSON.parse(await readFile(file, "utf8"))).toEqual({
      version: 1,
      address: "127.4.5.6",
      leases: { api: 41001 },
    });
    expect(await new JsonFilePortLeaseStore(file).address()).toBe("127.4.5.6");
  });

  test("a file written before addresses existed reads as no address, its leases intact", async () => {
    const file = path.join(dir, "ports.json");
    await writeFile(file, JSON.stringify({ version: 1, leases: { web: 41000 } }));
    const store = new JsonFilePortLeaseStore(file);
    expect(await store.address()).toBeUndefined();
    await store.setAddress("127.9.8.7");
    expect(await new JsonFilePortLeaseStore(file).entries()).toEqual({ web: 41000 });
    expect(await new JsonFilePortLeaseStore(file).address()).toBe("127.9.8.7");
  });

  test("an address that is not an IPv4 loopback address is neither recorded nor read", async () => {
    const file = path.join(dir, "ports.json");
    const store = new JsonFilePortLeaseStore(file);
    await expect(store.setAddress("0.0.0.0")).rejects.toMatchObject({ code: "INGRESS_LEASE_STORE_FAILED" });
    await writeFile(file, JSON.stringify({ version: 1, address: "10.0.0.1", leases: {} }));
    expect(await store.address()).toBeUndefined();
  });

  test("a value that is not a port is refused", async () => {
    const store = new JsonFilePortLeaseStore(path.join(dir, "previews.json"));
    await expect(store.set("web", 0)).rejects.toMatchObject({ code: "INGRESS_LEASE_STORE_FAILED" });
    await expect(store.set("web", 65536)).rejects.toMatchObject({ code: "INGRESS_LEASE_STORE_FAILED" });
  });
});

describe("MemoryPortLeaseStore", () => {
  test("holds leases for the life of the object", async () => {
    const store = new MemoryPortLeaseStore({ web: 41000 });
    await store.set("api", 41001);
    await store.delete("web");
    expect(await store.entries()).toEqual({ api: 41001 });
  });
});
