// A preview's life in the gateway: open, update and close, ports leased and kept, ports to avoid,
// cancellation, and a stop that cuts every client within a bounded time.
import { createServer as createNetServer, Socket } from "node:net";
import { request as httpRequest } from "node:http";
import path from "node:path";
import {
  adHocPreview,
  IngressError,
  isIngressError,
  JsonFilePortLeaseStore,
  MemoryPortLeaseStore,
  type PortLeaseStore,
} from "../src/index.js";
import { closedWithin, fetchRaw, httpStandIn, tempDir, testGateway, type StandIn } from "./support/helpers.js";

let guest: StandIn;
let other: StandIn;

beforeAll(async () => {
  guest = await httpStandIn((req, res) => {
    if (req.url === "/hang") return; // never answers
    if (req.url === "/upload") return; // reads nothing, answers nothing
    res.end("guest A");
  });
  other = await httpStandIn((_req, res) => res.end("guest B"));
});

afterAll(async () => {
  await guest.close();
  await other.close();
});

async function expectCode(promise: Promise<unknown>, code: string): Promise<IngressError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isIngressError(error)).toBe(true);
  expect((error as IngressError).code).toBe(code);
  return error as IngressError;
}

describe("open, list, origin, update", () => {
  test("links: app paths on the one origin, external links untouched, optional fields as declared", async () => {
    await using gateway = testGateway();
    const preview = await gateway.open({
      key: "web",
      guestPort: guest.port,
      links: [
        { url: "/", title: "web" },
        { url: "/docs?x=1#top", title: "Docs", description: "API docs", folder: "Help" },
        { url: "https://example.com/design", title: "Design", folder: "Help" },
      ],
    });
    expect(preview.origin).toBe(`http://127.0.0.1:${preview.hostPort}`);
    expect(preview.guestPort).toBe(guest.port);
    expect(preview.links).toEqual([
      { url: `${preview.origin}/`, title: "web", external: false },
      {
        url: `${preview.origin}/docs?x=1#top`,
        title: "Docs",
        description: "API docs",
        folder: "Help",
        external: false,
      },
      { url: "https://example.com/design", title: "Design", folder: "Help", external: true },
    ]);
    expect(gateway.list()).toEqual([preview]);
    expect(gateway.get("web")).toEqual(preview);
    expect(gateway.origin("web")).toBe(preview.origin);
    expect((await fetchRaw(preview.links[1]!.url)).body.toString()).toBe("guest A");
  });

  test("an ad-hoc preview is keyed port-<n> with one link to /", async () => {
    await using gateway = testGateway();
    const preview = await gateway.open(adHocPreview({ port: guest.port, title: "my server", description: "d" }));
    expect(preview.key).toBe(`port-${guest.port}`);
    expect(preview.links).toEqual([
      { url: `${preview.origin}/`, title: "my server", description: "d", external: false },
    ]);
    expect(adHocPreview({ port: 8000 }).links[0]!.title).toBe("port 8000");
    expect((await fetchRaw(preview.origin)).body.toString()).toBe("guest A");
  });

  test("opening an open key updates links and guest port on the same origin", async () => {
    await using gateway = testGateway();
    const first = await gateway.open({ key: "web", guestPort: guest.port, links: [{ url: "/", title: "v1" }] });
    const second = await gateway.open({ key: "web", guestPort: other.port, links: [{ url: "/new", title: "v2" }] });
    expect(second.origin).toBe(first.origin);
    expect(second.links.map((l) => l.url)).toEqual([`${first.origin}/new`]);
    expect(second.guestPort).toBe(other.port);
    expect((await fetchRaw(first.origin)).body.toString()).toBe("guest B");
    expect(gateway.list()).toHaveLength(1);
  });

  test("a reserved key holds its origin, answers 503 until open gives the guest port, then serves on that origin", async () => {
    await using gateway = testGateway({ leases: new MemoryPortLeaseStore() });
    const held = await gateway.reserve("web");
    expect(held.origin).toBe(`http://127.0.0.1:${held.hostPort}`);
    expect(await gateway.reserve("web")).toEqual(held);
    expect(gateway.origin("web")).toBe(held.origin);
    expect(gateway.has("web")).toBe(true);
    expect(gateway.size).toBe(1);
    expect(gateway.get("web")).toBeUndefined();
    expect(gateway.list()).toEqual([]);
    const starting = await fetchRaw(held.origin);
    expect(starting.status).toBe(503);
    expect(starting.headers["x-pi-sandbox-preview"]).toBe("gateway");
    expect(starting.body.toString()).toMatch(/Preview web is starting/);
    await expectCode(gateway.probe("web"), "INGRESS_NOT_OPEN");

    const opened = await gateway.open({ key: "web", guestPort: guest.port, links: [{ url: "/", title: "web" }] });
    expect(opened).toMatchObject({ origin: held.origin, hostPort: held.hostPort, guestPort: guest.port });
    expect(gateway.list()).toEqual([opened]);
    expect((await fetchRaw(held.origin)).body.toString()).toBe("guest A");
    // Reserving an open key changes nothing.
    expect(await gateway.reserve("web")).toEqual(held);
    expect(gateway.get("web")).toEqual(opened);

    // close gives a reservation up; the lease stays.
    const api = await gateway.reserve("api");
    await gateway.close("api");
    expect(gateway.has("api")).toBe(false);
    await expect(fetchRaw(api.origin)).rejects.toThrow(/ECONNREFUSED/);
    expect((await gateway.reserve("api")).hostPort).toBe(api.hostPort);
  });

  test("the caller's later changes to its spec object do not leak into the preview", async () => {
    await using gateway = testGateway();
    const links = [{ url: "/", title: "web" }];
    await gateway.open({ key: "web", guestPort: guest.port, links });
    links[0]!.title = "changed";
    expect(gateway.get("web")!.links[0]!.title).toBe("web");
  });

  test("invalid previews are rejected with every problem named", async () => {
    await using gateway = testGateway();
    const error = await expectCode(
      gateway.open({
        key: "Bad Key",
        guestPort: 70000,
        links: [
          { url: "//evil.example/", title: "x" },
          { url: "javascript:alert(1)", title: "y" },
          { url: "docs", title: "" },
        ],
      }),
      "INGRESS_INVALID_PREVIEW",
    );
    expect(error.message).toMatch(/key "Bad Key"/);
    expect(error.message).toMatch(/guestPort 70000/);
    expect(error.message).toMatch(/links\[0\]\.url "\/\/evil\.example\/"/);
    expect(error.message).toMatch(/links\[1\]\.url/);
    expect(error.message).toMatch(/links\[2\]\.title/);
    expect(gateway.list()).toEqual([]);
  });

  test("origin of a preview that is not open is INGRESS_NOT_OPEN", async () => {
    await using gateway = testGateway();
    expect(() => gateway.origin("nope")).toThrow(expect.objectContaining({ code: "INGRESS_NOT_OPEN" }));
    expect(gateway.get("nope")).toBeUndefined();
  });

  test("after closeAll, open fails with INGRESS_CLOSED and close is a no-op", async () => {
    const gateway = testGateway();
    await gateway.open({ key: "web", guestPort: guest.port, links: [] });
    await gateway.closeAll();
    await gateway.closeAll();
    expect(gateway.list()).toEqual([]);
    await expectCode(gateway.open({ key: "web", guestPort: guest.port, links: [] }), "INGRESS_CLOSED");
    await gateway.close("web");
  });
});

describe("port leases", () => {
  test("close and reopen rebinds the same host port; a closed preview refuses connections", async () => {
    await using gateway = testGateway();
    const first = await gateway.open({ key: "web", guestPort: guest.port, links: [] });
    await gateway.close("web");
    await expect(fetchRaw(first.origin)).rejects.toThrow(/ECONNREFUSED/);
    const again = await gateway.open({ key: "web", guestPort: guest.port, links: [] });
    expect(again.hostPort).toBe(first.hostPort);
    expect((await fetchRaw(again.origin)).body.toString()).toBe("guest A");
  });

  test("a JSON lease file keeps ports across gateways (controller restart)", async () => {
    const { dir, remove } = await tempDir();
    try {
      const file = path.join(dir, "previews.json");
      const a = testGateway({ leases: new JsonFilePortLeaseStore(file) });
      const web = await a.open({ key: "web", guestPort: guest.port, links: [] });
      const api = await a.open({ key: "api", guestPort: other.port, links: [] });
      expect(web.hostPort).not.toBe(api.hostPort);
      await a.closeAll();

      await using b = testGateway({ leases: new JsonFilePortLeaseStore(file) });
      expect((await b.open({ key: "api", guestPort: other.port, links: [] })).hostPort).toBe(api.hostPort);
      expect((await b.open({ key: "web", guestPort: guest.port, links: [] })).hostPort).toBe(web.hostPort);
    } finally {
      await remove();
    }
  });

  test("a leased port taken by another process fails that preview with INGRESS_PORT_IN_USE and does not move", async () => {
    const leases = new MemoryPortLeaseStore();
    const a = testGateway({ leases });
    const { hostPort } = await a.open({ key: "web", guestPort: guest.port, links: [] });
    await a.closeAll();

    const squatter = createNetServer();
    await new Promise<void>((resolve) => squatter.listen(hostPort, "127.0.0.1", resolve));
    try {
      await using b = testGateway({ leases });
      const error = await expectCode(b.open({ key: "web", guestPort: guest.port, links: [] }), "INGRESS_PORT_IN_USE");
      expect(error.message).toBe(`port ${hostPort} for preview web is taken by another process`);
      expect(error.hint).toBe("stop that process or destroy and recreate the instance");
      expect(error.details).toEqual({ key: "web", port: hostPort });
      expect(await leases.get("web")).toBe(hostPort);
      // Other previews are unaffected.
      await b.open({ key: "api", guestPort: other.port, links: [] });
      expect(b.list().map((p) => p.key)).toEqual(["api"]);
    } finally {
      await new Promise<void>((resolve) => squatter.close(() => resolve()));
    }
  });

  test("release closes the preview and forgets its lease", async () => {
    const leases = new MemoryPortLeaseStore();
    await using gateway = testGateway({ leases });
    await gateway.open({ key: "web", guestPort: guest.port, links: [] });
    await gateway.release("web");
    expect(gateway.list()).toEqual([]);
    expect(await leases.entries()).toEqual({});
  });

  test("a lease store that cannot write fails the open and leaves nothing listening", async () => {
    const broken: PortLeaseStore = {
      get: async () => undefined,
      entries: async () => ({}),
      delete: async () => undefined,
      set: async () => {
        throw new IngressError("INGRESS_LEASE_STORE_FAILED", "disk full");
      },
    };
    await using gateway = testGateway({ leases: broken });
    await expectCode(gateway.open({ key: "web", guestPort: guest.port, links: [] }), "INGRESS_LEASE_STORE_FAILED");
    expect(gateway.list()).toEqual([]);
  });
});

describe("ports the owner asks to avoid", () => {
  const everyPort = () => Promise.resolve(Array.from({ length: 65535 }, (_, i) => i + 1));

  test("a new lease never takes an avoided port: with all of them avoided, open fails and leases nothing", async () => {
    const leases = new MemoryPortLeaseStore();
    let asked = 0;
    await using gateway = testGateway({
      leases,
      avoidPorts: () => {
        asked++;
        return everyPort();
      },
    });
    const error = await expectCode(
      gateway.open({ key: "web", guestPort: guest.port, links: [] }),
      "INGRESS_LISTEN_FAILED",
    );
    expect(error.message).toContain("preview web");
    expect(asked).toBe(1);
    expect(gateway.size).toBe(0);
    expect(await leases.entries()).toEqual({});
  });

  test("a key that already has a lease keeps its port without asking", async () => {
    const leases = new MemoryPortLeaseStore();
    const first = testGateway({ leases });
    const { hostPort } = await first.open({ key: "web", guestPort: guest.port, links: [] });
    await first.closeAll();
    let asked = 0;
    await using again = testGateway({
      leases,
      avoidPorts: () => {
        asked++;
        return everyPort();
      },
    });
    expect((await again.open({ key: "web", guestPort: guest.port, links: [] })).hostPort).toBe(hostPort);
    expect(asked).toBe(0);
  });
});

describe("cancellation of open", () => {
  function slowStore(delayMs: number): PortLeaseStore {
    const inner = new MemoryPortLeaseStore();
    return {
      get: async (key) => {
        await new Promise((resolve) => setTimeout(resolve, delayMs));
        return inner.get(key);
      },
      set: (key, port) => inner.set(key, port),
      delete: (key) => inner.delete(key),
      entries: () => inner.entries(),
    };
  }

  test("an already-aborted signal rejects with its reason and opens nothing", async () => {
    await using gateway = testGateway();
    const reason = new Error("stop now");
    await expect(
      gateway.open({ key: "web", guestPort: guest.port, links: [] }, { signal: AbortSignal.abort(reason) }),
    ).rejects.toBe(reason);
    expect(gateway.list()).toEqual([]);
  });

  test("aborting during open rejects with the reason and leaves nothing listening", async () => {
    const leases = slowStore(200);
    await using gateway = testGateway({ leases });
    const controller = new AbortController();
    const reason = new Error("changed my mind");
    const pending = gateway.open({ key: "web", guestPort: guest.port, links: [] }, { signal: controller.signal });
    setTimeout(() => controller.abort(reason), 50);
    await expect(pending).rejects.toBe(reason);
    expect(gateway.list()).toEqual([]);
    expect(await leases.entries()).toEqual({});
  });

  test("aborting after open has no effect", async () => {
    await using gateway = testGateway();
    const controller = new AbortController();
    const preview = await gateway.open({ key: "web", guestPort: guest.port, links: [] }, { signal: controller.signal });
    controller.abort();
    expect((await fetchRaw(preview.origin)).status).toBe(200);
  });

  test("closeAll cancels an open in flight with INGRESS_CLOSED", async () => {
    const gateway = testGateway({ leases: slowStore(200) });
    const pending = gateway.open({ key: "web", guestPort: guest.port, links: [] });
    await gateway.closeAll();
    await expectCode(pending, "INGRESS_CLOSED");
    expect(gateway.list()).toEqual([]);
  });
});

describe("closeAll with a lease store that never answers", () => {
  test("still completes within closeTimeoutMs", async () => {
    const stuck: PortLeaseStore = {
      get: () => new Promise(() => undefined),
      set: async () => undefined,
      delete: async () => undefined,
      entries: async () => ({}),
    };
    const gateway = testGateway({ leases: stuck, closeTimeoutMs: 300 });
    void gateway.open({ key: "web", guestPort: guest.port, links: [] }).catch(() => undefined);
    const started = Date.now();
    await gateway.closeAll();
    expect(Date.now() - started).toBeLessThan(1_500);
  });
});

describe("stop cuts every client within a bounded time", () => {
  test("keep-alive client, request waiting on a silent guest, hung upload, half-sent headers", async () => {
    const gateway = testGateway({ closeTimeoutMs: 3_000 });
    const { hostPort, origin } = await gateway.open({ key: "web", guestPort: guest.port, links: [] });

    // 1. An idle keep-alive connection after a completed request.
    const idle = new Socket();
    await new Promise<void>((resolve) => idle.connect(hostPort, "127.0.0.1", resolve));
    idle.write(`GET / HTTP/1.1\r\nHost: 127.0.0.1:${hostPort}\r\n\r\n`);
    await new Promise((resolve) => idle.once("data", resolve));

    // 2. A request the guest never answers.
    const waiting = httpRequest(`${origin}/hang`, { agent: false });
    waiting.on("error", () => undefined);
    waiting.end();

    // 3. An upload that announced 100 MiB and then stalls; the guest never reads it either.
    const upload = new Socket();
    await new Promise<void>((resolve) => upload.connect(hostPort, "127.0.0.1", resolve));
    upload.on("error", () => undefined);
    upload.write(`POST /upload HTTP/1.1\r\nHost: 127.0.0.1:${hostPort}\r\nContent-Length: 104857600\r\n\r\n`);
    upload.write(Buffer.alloc(256 * 1024));

    // 4. A client that never finishes its request headers.
    const slow = new Socket();
    await new Promise<void>((resolve) => slow.connect(hostPort, "127.0.0.1", resolve));
    slow.write("GET / HTTP/1.1\r\nHost: 127.0.0.1");

    await new Promise((resolve) => setTimeout(resolve, 200));
    const waitingClosed = new Promise<void>((resolve) => waiting.once("close", () => resolve()));
    const allCut = Promise.all([
      closedWithin(idle, 2_000),
      closedWithin(upload, 2_000),
      closedWithin(slow, 2_000),
      waitingClosed,
    ]);
    const started = Date.now();
    await gateway.closeAll();
    expect(Date.now() - started).toBeLessThan(2_000);
    await allCut;
    await expect(fetchRaw(origin)).rejects.toThrow(/ECONNREFUSED/);
  });
});

describe("probe", () => {
  test("resolves when the guest port accepts connections", async () => {
    await using gateway = testGateway();
    await gateway.open({ key: "web", guestPort: guest.port, links: [] });
    await expect(gateway.probe("web")).resolves.toBeUndefined();
  });

  test("names the port and the service's logs when nothing listens", async () => {
    const gone = await httpStandIn(() => undefined);
    await gone.close();
    await using gateway = testGateway();
    await gateway.open({ key: "api", guestPort: gone.port, links: [] });
    const error = await expectCode(gateway.probe("api"), "INGRESS_UPSTREAM_FAILED");
    expect(error.message).toContain(`guest port ${gone.port}`);
    expect(error.hint).toContain("logs of service api");
    expect(error.details).toEqual({ key: "api", guestPort: gone.port });
  });

  test("an aborted signal rejects with its reason; an unknown key is INGRESS_NOT_OPEN", async () => {
    await using gateway = testGateway();
    await gateway.open({ key: "web", guestPort: guest.port, links: [] });
    const reason = new Error("enough");
    await expect(gateway.probe("web", { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    await expectCode(gateway.probe("nope"), "INGRESS_NOT_OPEN");
  });
});
