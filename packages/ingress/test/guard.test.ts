// Who may reach a preview: only loopback Host names for the preview's own port (no DNS rebinding,
// proxy requests or CONNECT), on 127.0.0.1 or the instance's own loopback address only.
import { connect } from "node:net";
import { isAllowedHost, isIngressError, isLoopbackOrigin, PreviewGateway } from "../src/index.js";
import { fetchRaw, httpStandIn, memoryLogger, rawExchange, testGateway, type StandIn } from "./support/helpers.js";

describe("Host header guard", () => {
  let guest: StandIn;
  let gateway: PreviewGateway;
  let port: number;
  let hits = 0;
  const logger = memoryLogger();

  beforeAll(async () => {
    guest = await httpStandIn((_req, res) => {
      hits++;
      res.end("guest");
    });
    gateway = testGateway({ logger });
    ({ hostPort: port } = await gateway.open({ key: "web", guestPort: guest.port, links: [] }));
  });

  afterAll(async () => {
    await gateway.closeAll();
    await guest.close();
  });

  test.each(["127.0.0.1", "localhost", "LOCALHOST", "[::1]"])("Host %s:<port> is served", async (name) => {
    const res = await fetchRaw(`http://127.0.0.1:${port}/`, { headers: { host: `${name}:${port}` } });
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe("guest");
  });

  test("a DNS-rebinding attempt (foreign name resolving to 127.0.0.1) is refused before reaching the guest", async () => {
    const before = hits;
    const res = await fetchRaw(`http://127.0.0.1:${port}/secret`, { headers: { host: `attacker.example:${port}` } });
    expect(res.status).toBe(403);
    expect(res.body.toString()).toMatch(/Host "attacker\.example:\d+".*DNS rebinding/);
    expect(res.body.toString()).toContain(`http://127.0.0.1:${port}/`);
    expect(hits).toBe(before);
    expect(logger.lines.some((line) => line.includes("refused GET /secret"))).toBe(true);
  });

  test.each([
    ["another port", (p: number) => `127.0.0.1:${p + 1}`],
    ["no port", () => "127.0.0.1"],
    ["a LAN address", (p: number) => `192.168.1.10:${p}`],
    ["0.0.0.0", (p: number) => `0.0.0.0:${p}`],
    ["a localhost lookalike", (p: number) => `localhost.evil.example:${p}`],
  ])("Host with %s is refused", async (_label, host) => {
    const res = await fetchRaw(`http://127.0.0.1:${port}/`, { headers: { host: host(port) } });
    expect(res.status).toBe(403);
  });

  test("a request without any Host header is refused", async () => {
    const text = await rawExchange(port, "GET / HTTP/1.0\r\n\r\n");
    expect(text).toMatch(/^HTTP\/1\.1 403 /);
    expect(text).toContain("no Host header");
  });

  test("a proxy-style absolute request target is refused", async () => {
    const text = await rawExchange(port, `GET http://127.0.0.1:${port}/ HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
    expect(text).toMatch(/^HTTP\/1\.1 400 /);
    expect(text).toContain("not a path");
  });

  test("CONNECT tunnels are not offered", async () => {
    const text = await rawExchange(port, `CONNECT example.com:443 HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
    expect(text).not.toMatch(/^HTTP\/1\.1 200/);
  });

  test("the listener is bound to 127.0.0.1 only, not other local addresses", async () => {
    // On Linux all of 127/8 reaches the host, so 127.0.0.2 tells a 127.0.0.1 bind from a wildcard one.
    const error = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
      const socket = connect({ host: process.platform === "linux" ? "127.0.0.2" : "::1", port });
      socket.once("connect", () => {
        socket.destroy();
        resolve(undefined);
      });
      socket.once("error", resolve);
    });
    expect(error?.code).toBe("ECONNREFUSED");
  });
});

// Linux: every address of 127.0.0.0/8 is bindable without setup.
const linuxOnly = process.platform === "linux" ? describe : describe.skip;

linuxOnly("a gateway on an instance's own loopback address", () => {
  let guest: StandIn;
  let gateway: PreviewGateway;
  let port: number;
  let origin: string;

  beforeAll(async () => {
    guest = await httpStandIn((_req, res) => res.end("guest"));
    gateway = testGateway({ address: "127.0.0.2" });
    ({ hostPort: port, origin } = await gateway.open({ key: "web", guestPort: guest.port, links: [] }));
  });

  afterAll(async () => {
    await gateway.closeAll();
    await guest.close();
  });

  test("serves http://<address>:<port>/ and names that address in its origin", async () => {
    expect(origin).toBe(`http://127.0.0.2:${port}`);
    expect(gateway.address).toBe("127.0.0.2");
    const res = await fetchRaw(`${origin}/`);
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe("guest");
  });

  test.each(["127.0.0.1", "localhost", "[::1]", "127.0.0.3"])(
    "Host %s:<port> is refused with the one name it answers",
    async (name) => {
      const res = await fetchRaw(`${origin}/`, { headers: { host: `${name}:${port}` } });
      expect(res.status).toBe(403);
      expect(res.body.toString()).toContain(`only answers requests for 127.0.0.2:${port} (`);
    },
  );

  test("nothing answers on 127.0.0.1 at the preview's port", async () => {
    const error = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
      const socket = connect({ host: "127.0.0.1", port });
      socket.once("connect", () => {
        socket.destroy();
        resolve(undefined);
      });
      socket.once("error", resolve);
    });
    expect(error?.code).toBe("ECONNREFUSED");
  });

  test("an address outside 127.0.0.0/8 is refused with INGRESS_INVALID_ADDRESS", () => {
    for (const address of ["0.0.0.0", "192.168.1.10", "::1", "localhost", "127.0.0.256"]) {
      let caught: unknown;
      try {
        testGateway({ address });
      } catch (error) {
        caught = error;
      }
      expect(isIngressError(caught) && caught.code).toBe("INGRESS_INVALID_ADDRESS");
    }
  });
});

describe("guard helpers", () => {
  test("isAllowedHost matches exact loopback names for the exact port", () => {
    expect(isAllowedHost("127.0.0.1:8080", 8080)).toBe(true);
    expect(isAllowedHost("[::1]:8080", 8080)).toBe(true);
    expect(isAllowedHost("localhost:08080", 8080)).toBe(true);
    expect(isAllowedHost("localhost:8080", 8081)).toBe(false);
    expect(isAllowedHost("::1:8080", 8080)).toBe(false);
    expect(isAllowedHost("127.0.0.2:8080", 8080)).toBe(false);
    expect(isAllowedHost(undefined, 8080)).toBe(false);
    expect(isAllowedHost(":8080", 8080)).toBe(false);
  });

  test("isAllowedHost on an instance's own address accepts that address only", () => {
    expect(isAllowedHost("127.4.5.6:8080", 8080, "127.4.5.6")).toBe(true);
    expect(isAllowedHost("127.0.0.1:8080", 8080, "127.4.5.6")).toBe(false);
    expect(isAllowedHost("localhost:8080", 8080, "127.4.5.6")).toBe(false);
    expect(isAllowedHost("[::1]:8080", 8080, "127.4.5.6")).toBe(false);
    expect(isAllowedHost("127.4.5.7:8080", 8080, "127.4.5.6")).toBe(false);
  });

  test("isLoopbackOrigin accepts http loopback pages only", () => {
    expect(isLoopbackOrigin("http://127.0.0.1:3000")).toBe(true);
    expect(isLoopbackOrigin("http://localhost")).toBe(true);
    expect(isLoopbackOrigin("http://[::1]:5173")).toBe(true);
    expect(isLoopbackOrigin("https://127.0.0.1")).toBe(false);
    expect(isLoopbackOrigin("http://evil.example")).toBe(false);
    expect(isLoopbackOrigin("null")).toBe(false);
  });
});
