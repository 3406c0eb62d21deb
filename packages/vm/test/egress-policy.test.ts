// The VM's egress policy: which hosts a guest reaches, where a secret's placeholder may go and what it becomes.
import { egressPolicy, hostPortsTcp, isHostAllowed, secretStore } from "../src/egress/egress-policy.js";
import { substituteHeader } from "../src/egress/secret-rules.js";
import { loadGondolin } from "../src/gondolin-loader.js";

test("host patterns match as in Gondolin: exact, * alone, * as a wildcard, any case", () => {
  expect(isHostAllowed("registry.npmjs.org", ["registry.npmjs.org"])).toBe(true);
  expect(isHostAllowed("Registry.NPMJS.org", ["registry.npmjs.org"])).toBe(true);
  expect(isHostAllowed("evil-registry.npmjs.org", ["registry.npmjs.org"])).toBe(false);
  expect(isHostAllowed("registry.npmjs.org.evil.test", ["registry.npmjs.org"])).toBe(false);
  expect(isHostAllowed("a.b.example.com", ["*.example.com"])).toBe(true);
  expect(isHostAllowed("example.com", ["*.example.com"])).toBe(false);
  expect(isHostAllowed("anything", ["*"])).toBe(true);
  expect(isHostAllowed("anything", [])).toBe(false);
  expect(isHostAllowed("a.b", ["a?b"])).toBe(false);
});

test("the policy refuses names off the list by name, internal addresses unless allowed, and pins synthetic DNS", async () => {
  const gondolin = await loadGondolin();
  const policy = egressPolicy(gondolin, { allowedHosts: ["pisb-allowed.test"], allowedInternalHosts: ["127.0.0.1"] });
  expect(policy.dns).toEqual({ mode: "synthetic" });
  const hooks = policy.httpHooks;
  // The name check Gondolin runs before it resolves anything (egress.vm.test.ts shows the order).
  await expect(hooks.isRequestAllowed!(new Request("http://leak-1234.attacker.test/x"))).resolves.toBe(false);
  await expect(hooks.isRequestAllowed!(new Request("https://pisb-allowed.test/"))).resolves.toBe(true);
  await expect(hooks.isRequestAllowed!(new Request("http://127.0.0.1:8080/"))).resolves.toBe(true);
  // Gondolin's address check still applies to the addresses an allowed name resolves to.
  const ip = (hostname: string, address: string) =>
    hooks.isIpAllowed!({ hostname, ip: address, family: 4, port: 80, protocol: "http" });
  await expect(ip("pisb-allowed.test", "203.0.113.7")).resolves.toBe(true);
  await expect(ip("pisb-allowed.test", "169.254.169.254")).resolves.toBe(false);
  await expect(ip("pisb-allowed.test", "127.0.0.1")).resolves.toBe(false);
  await expect(ip("127.0.0.1", "127.0.0.1")).resolves.toBe(true);
});

test("without host ports nothing is mapped and DNS keeps its one synthetic address", async () => {
  const gondolin = await loadGondolin();
  for (const hostPorts of [undefined, []]) {
    const policy = egressPolicy(gondolin, { allowedHosts: [], ...(hostPorts ? { hostPorts } : {}) });
    expect(policy.tcp).toBeUndefined();
    expect(policy.dns).toEqual({ mode: "synthetic" });
  }
});

test("host ports map host.sandbox.internal:<port> to the host's 127.0.0.1:<port>, each with its port", async () => {
  const gondolin = await loadGondolin();
  const policy = egressPolicy(gondolin, { allowedHosts: ["pisb-allowed.test"], hostPorts: [8000, 5432] });
  expect(policy.tcp).toEqual({
    hosts: { "host.sandbox.internal:8000": "127.0.0.1:8000", "host.sandbox.internal:5432": "127.0.0.1:5432" },
  });
  // Gondolin maps a flow by the name its DNS gave the address: one address per name, only now.
  expect(policy.dns).toEqual({ mode: "synthetic", syntheticHostMapping: "per-host" });
  // The HTTP policy is the same as without host ports: the name is not on any list.
  await expect(policy.httpHooks.isRequestAllowed!(new Request("http://host.sandbox.internal:8000/"))).resolves.toBe(
    false,
  );
  await expect(policy.httpHooks.isRequestAllowed!(new Request("https://pisb-allowed.test/"))).resolves.toBe(true);
});

test("a host port a secret is sent to maps to its proxy; Gondolin gets only the secret's HTTP hosts", async () => {
  const gondolin = await loadGondolin();
  let closed = false;
  const proxies = {
    targets: () => new Map([[8000, 41000]]),
    close: async () => void (closed = true),
  };
  const secret = { value: "real-1", placeholder: "PI_SANDBOX_SECRET_abc", hosts: ["host.sandbox.internal:8000"] };
  const policy = egressPolicy(gondolin, {
    allowedHosts: [],
    hostPorts: [8000, 9000],
    secrets: { KEY: secret },
    proxies,
  });
  expect(policy.tcp).toEqual({
    hosts: { "host.sandbox.internal:8000": "127.0.0.1:41000", "host.sandbox.internal:9000": "127.0.0.1:9000" },
  });
  expect(policy.env).toEqual({ KEY: "PI_SANDBOX_SECRET_abc" });
  await policy.close();
  expect(closed).toBe(true);
});

test.each([[[0]], [[65536]], [[80.5]], [[8000, 8000]], [[Number.NaN]]])(
  "host ports %j are refused with VM_RESOURCES_UNSUPPORTED",
  (hostPorts) => {
    expect(() => hostPortsTcp(hostPorts)).toThrow(
      expect.objectContaining({ code: "VM_RESOURCES_UNSUPPORTED", details: { hostPorts } }),
    );
  },
);

describe("secrets", () => {
  const VALUE = "real-token-1b2c3d";
  const PLACEHOLDER = "PI_SANDBOX_SECRET_0123456789abcdef";
  const policyWith = async (value = VALUE, headers?: string[]) =>
    egressPolicy(await loadGondolin(), {
      allowedHosts: ["api.pisb.test", "other.pisb.test"],
      secrets: {
        API_TOKEN: { value, placeholder: PLACEHOLDER, hosts: ["api.pisb.test"], ...(headers ? { headers } : {}) },
      },
    });
  const allowed = async (
    policy: Awaited<ReturnType<typeof policyWith>>,
    url: string,
    headers: Record<string, string>,
  ) => policy.httpHooks.isRequestAllowed!(new Request(url, { headers }));
  const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;

  test("the guest's environment holds the placeholder, never the value; Gondolin gets a fetch that puts it in", async () => {
    const policy = await policyWith();
    expect(policy.env).toEqual({ API_TOKEN: PLACEHOLDER });
    expect(typeof policy.fetch).toBe("function");
    await policy.close();
    expect((await egressPolicy(await loadGondolin(), { allowedHosts: [] })).fetch).toBeUndefined();
  });

  test("a placeholder may go only into a credential header of an HTTPS request to port 443 of a listed host", async () => {
    const policy = await policyWith(VALUE, ["X-Goog-Api-Key"]);
    const ok = "https://api.pisb.test/v1";
    expect(await allowed(policy, ok, { authorization: `Bearer ${PLACEHOLDER}` })).toBe(true);
    expect(await allowed(policy, ok, { authorization: basic("x-access-token", PLACEHOLDER) })).toBe(true);
    expect(await allowed(policy, ok, { "x-api-key": PLACEHOLDER })).toBe(true);
    expect(await allowed(policy, ok, { "x-goog-api-key": PLACEHOLDER })).toBe(true);
    expect(await allowed(policy, "https://api.pisb.test:443/v1", { "x-api-key": PLACEHOLDER })).toBe(true);
    for (const [url, headers] of [
      [ok, { "user-agent": `curl/8 ${PLACEHOLDER}` }],
      [ok, { "anthropic-beta": PLACEHOLDER }],
      [`${ok}?key=${PLACEHOLDER}`, {}],
      ["http://api.pisb.test/v1", { authorization: `Bearer ${PLACEHOLDER}` }],
      ["https://api.pisb.test:8080/v1", { authorization: `Bearer ${PLACEHOLDER}` }],
      ["https://other.pisb.test/v1", { authorization: `Bearer ${PLACEHOLDER}` }],
      ["https://other.pisb.test/v1", { authorization: `Bearer ${VALUE}` }],
      [ok, { "user-agent": VALUE }],
    ] as [string, Record<string, string>][]) {
      expect({ url, headers, allowed: await allowed(policy, url, headers) }).toEqual({ url, headers, allowed: false });
    }
    // Without a placeholder every allowed host passes; a placeholder in a body is not looked at.
    expect(await allowed(policy, "http://other.pisb.test:8080/x", { "x-a": "b" })).toBe(true);
    await policy.close();
  });

  test("an updated value is used from then on; the old one may not be sent anywhere", async () => {
    const policy = await policyWith();
    policy.updateSecret("API_TOKEN", "rotated-token-9f8e");
    expect(await allowed(policy, "https://api.pisb.test/x", { authorization: `Bearer ${VALUE}` })).toBe(false);
    expect(await allowed(policy, "https://api.pisb.test/x", { authorization: `Bearer ${PLACEHOLDER}` })).toBe(true);
    expect(() => policy.updateSecret("NOPE", "x")).toThrow(expect.objectContaining({ code: "VM_SECRET_INVALID" }));
    await policy.close();
  });

  test("a placeholder that changed with its value is put in, and so is the one the guest read before", async () => {
    const policy = await policyWith();
    const shaped = "eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjJ9.c2hhcGVkLXBsYWNlaG9sZGVyLXJhbmRvbQ";
    policy.updateSecret("API_TOKEN", "rotated-token-9f8e", shaped);
    for (const sent of [shaped, PLACEHOLDER]) {
      expect(await allowed(policy, "https://api.pisb.test/x", { authorization: `Bearer ${sent}` })).toBe(true);
      expect(await allowed(policy, "https://api.pisb.test/x", { "user-agent": sent })).toBe(false);
    }
    const store = secretStore({ A: { value: "token-a-1234", placeholder: "ph-a-0000000000", hosts: ["a.test"] } });
    store.update("A", "token-a-5678", "ph-a-1111111111");
    expect(substituteHeader("authorization", "Bearer ph-a-0000000000", store.all())).toBe("Bearer token-a-5678");
    expect(substituteHeader("authorization", "Bearer ph-a-1111111111", store.all())).toBe("Bearer token-a-5678");
    // A placeholder holding the value, or overlapping another secret's, is refused.
    expect(() => policy.updateSecret("API_TOKEN", "rotated-token-9f8e", "x.rotated-token-9f8e.y")).toThrow(
      expect.objectContaining({ code: "VM_SECRET_INVALID" }),
    );
    await policy.close();
  });

  test.each([
    ["", undefined, /is empty/],
    [`${VALUE}\n`, undefined, /line break or NUL/],
    [PLACEHOLDER, undefined, /placeholder of one line that differs from its value/],
    [VALUE, ["x api key"], /lists "x api key" in headers, which is not a header name/],
  ])(
    "a bad value or header is VM_SECRET_INVALID and the message never quotes a value (%#)",
    async (value, headers, message) => {
      const error = await policyWith(value, headers).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: "VM_SECRET_INVALID", details: expect.anything() });
      expect((error as Error).message).toMatch(message);
      if (value !== "")
        expect(
          JSON.stringify({ m: (error as Error).message, d: (error as { details: unknown }).details }),
        ).not.toContain(value.trim());
    },
  );
});

describe("read-only mounts", () => {
  test("a host directory becomes a read-only provider; a missing or relative one is VM_MOUNT_INVALID", async () => {
    const { readonlyMounts } = await import("../src/boot/mounts.js");
    const gondolin = await loadGondolin();
    const { tmpdir } = await import("node:os");
    expect(await readonlyMounts(gondolin, [])).toBeUndefined();
    const mounts = await readonlyMounts(gondolin, [{ hostPath: tmpdir(), guestPath: "/mnt/docs/" }]);
    expect(Object.keys(mounts!)).toEqual(["/mnt/docs"]);
    expect(mounts!["/mnt/docs"]!.readonly).toBe(true);
    for (const mount of [
      { hostPath: "/nonexistent-pisb-dir", guestPath: "/mnt/a" },
      { hostPath: "relative/dir", guestPath: "/mnt/a" },
      { hostPath: tmpdir(), guestPath: "mnt" },
    ]) {
      await expect(readonlyMounts(gondolin, [mount])).rejects.toMatchObject({ code: "VM_MOUNT_INVALID" });
    }
  });
});

test("every request's decision is told with its host, port and rule; a secret's use with its name, never its value", async () => {
  const gondolin = await loadGondolin();
  const events: unknown[] = [];
  const policy = egressPolicy(gondolin, {
    allowedHosts: ["pisb-allowed.test"],
    secrets: {
      KEY: {
        value: "real-value-9f8e7d",
        placeholder: "PI_SANDBOX_SECRET_0123456789abcdef",
        hosts: ["pisb-allowed.test"],
      },
    },
    onEvent: (event) => events.push(event),
  });
  const hooks = policy.httpHooks;
  await hooks.isRequestAllowed!(new Request("https://pisb-allowed.test/v1", { method: "POST" }));
  await hooks.isRequestAllowed!(new Request("http://elsewhere.test:8080/x"));
  // The placeholder may not go to another host's URL: refused by the secret rules.
  await hooks.isRequestAllowed!(new Request("https://pisb-allowed.test/?k=PI_SANDBOX_SECRET_0123456789abcdef"));
  expect(events).toEqual([
    {
      kind: "request",
      host: "pisb-allowed.test",
      port: 443,
      protocol: "https",
      method: "POST",
      allowed: true,
      rule: "allowedHosts",
    },
    {
      kind: "request",
      host: "elsewhere.test",
      port: 8080,
      protocol: "http",
      method: "GET",
      allowed: false,
      rule: "not in allowedHosts",
    },
    {
      kind: "request",
      host: "pisb-allowed.test",
      port: 443,
      protocol: "https",
      method: "GET",
      allowed: false,
      rule: "secret rules",
    },
  ]);
  expect(JSON.stringify(events)).not.toContain("real-value-9f8e7d");
  await policy.close();
});

test("a host off the list waits for the approver: its answer decides, is recorded with its rule, and lets the address check pass", async () => {
  const gondolin = await loadGondolin();
  const events: unknown[] = [];
  const asked: unknown[] = [];
  let answer!: (verdict: { allowed: boolean; rule: "approved once" | "denied by the user" }) => void;
  const policy = egressPolicy(gondolin, {
    allowedHosts: ["pisb-allowed.test"],
    onEvent: (event) => events.push(event),
    approve: (request) => {
      asked.push(request);
      return new Promise((resolve) => (answer = resolve));
    },
  });
  const hooks = policy.httpHooks;
  const ip = (hostname: string, address: string) =>
    hooks.isIpAllowed!({ hostname, ip: address, family: 4, port: 443, protocol: "https" });
  // Not approved yet: the address check refuses the name too.
  await expect(ip("new.example.test", "203.0.113.9")).resolves.toBe(false);
  const held = hooks.isRequestAllowed!(new Request("https://New.Example.test/path?q=1", { method: "POST" }));
  await new Promise((resolve) => setImmediate(resolve));
  expect(asked).toEqual([{ host: "new.example.test", port: 443, protocol: "https", method: "POST" }]);
  expect(events).toEqual([]);
  answer({ allowed: true, rule: "approved once" });
  await expect(held).resolves.toBe(true);
  expect(events).toEqual([
    {
      kind: "request",
      host: "new.example.test",
      port: 443,
      protocol: "https",
      method: "POST",
      allowed: true,
      rule: "approved once",
    },
  ]);
  await expect(ip("new.example.test", "203.0.113.9")).resolves.toBe(true);
  // Internal addresses stay refused for an approved name.
  await expect(ip("new.example.test", "10.0.0.1")).resolves.toBe(false);
  // An IP literal is asked about like a name; a refusal is recorded with its rule.
  const literal = hooks.isRequestAllowed!(new Request("http://198.51.100.4:8080/"));
  await new Promise((resolve) => setImmediate(resolve));
  expect(asked.at(-1)).toEqual({ host: "198.51.100.4", port: 8080, protocol: "http", method: "GET" });
  answer({ allowed: false, rule: "denied by the user" });
  await expect(literal).resolves.toBe(false);
  expect(events.at(-1)).toMatchObject({ host: "198.51.100.4", allowed: false, rule: "denied by the user" });
  // Hosts on the list never reach the approver.
  await expect(hooks.isRequestAllowed!(new Request("https://pisb-allowed.test/"))).resolves.toBe(true);
  expect(asked).toHaveLength(2);
});

test("an approver that fails refuses the request; without one a host off the list is refused at once", async () => {
  const gondolin = await loadGondolin();
  const events: { rule?: string }[] = [];
  const failing = egressPolicy(gondolin, {
    allowedHosts: [],
    onEvent: (event) => events.push(event as { rule?: string }),
    approve: () => Promise.reject(new Error("gone")),
  });
  await expect(failing.httpHooks.isRequestAllowed!(new Request("https://x.example.test/"))).resolves.toBe(false);
  expect(events.at(-1)?.rule).toBe("no answer in time");
  const plain = egressPolicy(gondolin, {
    allowedHosts: [],
    onEvent: (event) => events.push(event as { rule?: string }),
  });
  await expect(plain.httpHooks.isRequestAllowed!(new Request("https://x.example.test/"))).resolves.toBe(false);
  expect(events.at(-1)?.rule).toBe("not in allowedHosts");
});
