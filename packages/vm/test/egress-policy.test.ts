import { egressPolicy, hostPortsTcp, isHostAllowed } from "../src/egress-policy.js";
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

test.each([[[0]], [[65536]], [[80.5]], [[8000, 8000]], [[Number.NaN]]])(
  "host ports %j are refused with VM_RESOURCES_UNSUPPORTED",
  (hostPorts) => {
    expect(() => hostPortsTcp(hostPorts)).toThrow(
      expect.objectContaining({ code: "VM_RESOURCES_UNSUPPORTED", details: { hostPorts } }),
    );
  },
);
