// network.secrets and mounts in sandbox.yaml: secret sources and their hosts (never a value written
// inline), host paths resolved against the file, mounts kept inside the workspace and apart.
import { resolve } from "node:path";
import {
  LIMITS,
  expandHome,
  hostPatternCovers,
  parseConfig,
  parseSecretSource,
  renderConfig,
  sandboxJsonSchema,
  secretHostPorts,
  secretHttpHosts,
} from "../src/index.js";
import { issueAt, rejection } from "./support/helpers.js";

const VALUE = "ghp_SHOULD_NEVER_BE_PRINTED_1234567890";

const withSecrets = (secrets: string, allowed = "[api.github.com, '*.example.com']") =>
  `version: 1\nnetwork:\n  allowedHosts: ${allowed}\n  secrets:\n${secrets
    .trim()
    .split("\n")
    .map((line) => `    ${line}`)
    .join("\n")}\n`;

describe("network.secrets", () => {
  test("a reference is kept with its hosts; relative files resolve against the YAML file, ~/ stays", () => {
    const config = parseConfig(
      withSecrets(`
GITHUB_TOKEN: { from: 'env:GITHUB_TOKEN', hosts: [API.github.com] }
NPM: { from: 'file:secrets/npm', hosts: ['*.example.com'] }
GH2: { from: 'file:~/.config/gh/token', hosts: [a.example.com] }
`),
      { sourcePath: "/proj/sandbox.yaml" },
    );
    expect(config.network.secrets).toEqual({
      GITHUB_TOKEN: { from: "env:GITHUB_TOKEN", hosts: ["api.github.com"] },
      NPM: { from: `file:${resolve("/proj/secrets/npm")}`, hosts: ["*.example.com"] },
      GH2: { from: "file:~/.config/gh/token", hosts: ["a.example.com"] },
    });
    expect(parseConfig(renderConfig(config))).toEqual(config);
  });

  test("headers name extra credential headers: kept lowercase without duplicates, and render back", () => {
    const config = parseConfig(
      withSecrets(`GEMINI: { from: 'env:GEMINI', hosts: [api.github.com], headers: [X-Goog-Api-Key, x-goog-api-key] }`),
    );
    expect(config.network.secrets.GEMINI).toEqual({
      from: "env:GEMINI",
      hosts: ["api.github.com"],
      headers: ["x-goog-api-key"],
    });
    expect(parseConfig(renderConfig(config))).toEqual(config);
  });

  test.each(["x api key", "host", "Content-Length", ""])(
    "a header that is not a credential header name (%j) is CONFIG_INVALID",
    (name) => {
      const error = rejection(withSecrets(`K: { from: 'env:K', hosts: [api.github.com], headers: ["${name}"] }`));
      expect(error.code).toBe("CONFIG_INVALID");
      expect(issueAt(error, "network.secrets.K.headers.0").message).toMatch(/must be an HTTP header name/);
    },
  );

  test("defaults to none", () => {
    expect(parseConfig("version: 1").network.secrets).toEqual({});
    expect(parseConfig("version: 1").mounts).toEqual([]);
  });

  test("a value written inline is refused with a hint, and the value is never quoted", () => {
    for (const text of [
      withSecrets(`GH: ${VALUE}`),
      withSecrets(`GH: { from: ${VALUE}, hosts: [api.github.com] }`),
      withSecrets(`GH: { value: ${VALUE}, hosts: [api.github.com] }`),
      withSecrets(`GH: { from: 'env:GH', token: ${VALUE}, hosts: [api.github.com] }`),
      withSecrets(`GH: [${VALUE}]`),
      withSecrets(`GH: { from: [${VALUE}], hosts: [api.github.com] }`),
    ]) {
      const error = rejection(text);
      expect(error.message).not.toContain(VALUE);
      expect(JSON.stringify(error.issues)).not.toContain(VALUE);
      expect(JSON.stringify(error.details ?? {})).not.toContain(VALUE);
      expect(error.message).toMatch(/never written in sandbox\.yaml.*env:NAME/);
    }
  });

  test("every host must be covered by allowedHosts", () => {
    const error = rejection(
      withSecrets(`
GH: { from: 'env:GH', hosts: [api.github.com, uploads.github.com, b.example.com, '*.x.example.com'] }
`),
    );
    expect(error.issues).toHaveLength(1);
    expect(issueAt(error, "network.secrets.GH.hosts.1").message).toMatch(
      /"uploads.github.com" is not covered by `network.allowedHosts`/,
    );
  });

  test("host.sandbox.internal sends a value to the host ports (all, or one with :<port>), not through allowedHosts", () => {
    const text = (hosts: string, hostPorts = "[8000, 9000]") =>
      `version: 1\nnetwork:\n  hostPorts: ${hostPorts}\n  secrets:\n    M: { from: 'env:M', hosts: ${hosts} }\n`;
    expect(parseConfig(text("[Host.Sandbox.Internal]")).network.secrets.M!.hosts).toEqual(["host.sandbox.internal"]);
    const one = parseConfig(text("['host.sandbox.internal:9000']"));
    expect(one.network.secrets.M!.hosts).toEqual(["host.sandbox.internal:9000"]);
    expect(parseConfig(renderConfig(one))).toEqual(one);
    expect(secretHostPorts(["host.sandbox.internal"], [8000, 9000])).toEqual([8000, 9000]);
    expect(secretHostPorts(["api.github.com", "host.sandbox.internal:9000"], [8000, 9000])).toEqual([9000]);
    expect(secretHostPorts(["api.github.com"], [8000])).toEqual([]);
    expect(secretHttpHosts(["api.github.com", "host.sandbox.internal:9000", "host.sandbox.internal"])).toEqual([
      "api.github.com",
    ]);
    expect(issueAt(rejection(text("['host.sandbox.internal:7000']")), "network.secrets.M.hosts.0").message).toMatch(
      /names host port 7000, which `network.hostPorts` does not list; add 7000 there too/,
    );
    expect(issueAt(rejection(text("[host.sandbox.internal]", "[]")), "network.secrets.M.hosts.0").message).toMatch(
      /`network.hostPorts`, which lists none/,
    );
    for (const bad of ["'host.sandbox.internal:0'", "'host.sandbox.internal:123456'", "'api.github.com:443'"]) {
      expect(issueAt(rejection(text(`[${bad}]`)), "network.secrets.M.hosts.0").message).toMatch(
        /host.sandbox.internal\[:<port>\]/,
      );
    }
  });

  test("a wildcard over host.sandbox.internal is refused: the host services are named exactly", () => {
    const error = rejection(
      withSecrets(`M: { from: 'env:M', hosts: ['*.sandbox.internal'] }`, `['*.sandbox.internal']`),
    );
    expect(issueAt(error, "network.secrets.M.hosts.0").message).toMatch(
      /is a wildcard over host.sandbox.internal; name the host services exactly/,
    );
  });

  test("names are environment variable names, not ones the guest needs for itself", () => {
    expect(
      issueAt(rejection(withSecrets("1X: { from: 'env:X', hosts: [api.github.com] }")), "network.secrets.1X"),
    ).toBeTruthy();
    const path = issueAt(
      rejection(withSecrets("PATH: { from: 'env:X', hosts: [api.github.com] }")),
      "network.secrets.PATH",
    );
    expect(path.message).toMatch(/the guest needs for itself/);
  });

  test(`at most ${LIMITS.secretsMax}`, () => {
    const many = Array.from(
      { length: LIMITS.secretsMax + 1 },
      (_, i) => `S${i}: { from: 'env:S', hosts: [api.github.com] }`,
    );
    expect(rejection(withSecrets(many.join("\n"))).message).toMatch(/at most 32 secrets/);
  });

  test("the source is split into its kind; ~ expands under the given home", () => {
    expect(parseSecretSource("env:GH")).toEqual({ kind: "env", name: "GH" });
    expect(parseSecretSource("file:/a b/c")).toEqual({ kind: "file", path: "/a b/c" });
    expect(expandHome("~/x/y", "/home/me")).toBe("/home/me/x/y");
    expect(expandHome("~", "/home/me")).toBe("/home/me");
    expect(expandHome("/abs/~/x", "/home/me")).toBe("/abs/~/x");
  });

  test("host coverage: exact, or a wildcard over the name or a narrower wildcard", () => {
    expect(hostPatternCovers("api.github.com", "API.github.com")).toBe(true);
    expect(hostPatternCovers("*.github.com", "api.github.com")).toBe(true);
    expect(hostPatternCovers("*.github.com", "*.api.github.com")).toBe(true);
    expect(hostPatternCovers("*.github.com", "github.com")).toBe(false);
    expect(hostPatternCovers("*.github.com", "evilgithub.com")).toBe(false);
    expect(hostPatternCovers("api.github.com", "*.github.com")).toBe(false);
  });
});

describe("mounts", () => {
  test("host paths resolve against the YAML file (~ kept); guest paths are normalised", () => {
    const config = parseConfig(
      "version: 1\nmounts:\n  - { host: ./docs, guest: /mnt/docs/ }\n  - { host: ~/notes, guest: /mnt//notes }\n",
      { sourcePath: "/proj/sandbox.yaml" },
    );
    expect(config.mounts).toEqual([
      { host: resolve("/proj/docs"), guest: "/mnt/docs" },
      { host: "~/notes", guest: "/mnt/notes" },
    ]);
    expect(parseConfig(renderConfig(config))).toEqual(config);
  });

  test.each([
    ["/", /absolute guest path/],
    ["mnt", /absolute guest path/],
    ["/mnt/../etc", /must not contain \.\./],
    ["/etc/x", /the guest's own system/],
    ["/proc", /the guest's own system/],
    ["/data/x", /the guest's own system/],
    ["/workspace", /would cover the workspace/],
  ])("guest path %s is refused", (guest, message) => {
    const error = rejection(`version: 1\nmounts: [{ host: ./a, guest: '${guest}' }]\n`);
    expect(issueAt(error, "mounts.0.guest").message).toMatch(message);
  });

  test("a mount above the workspace is refused; mounts may not nest", () => {
    const error = rejection(
      "version: 1\nworkspace: /srv/app\nmounts:\n  - { host: ./a, guest: /srv }\n  - { host: ./b, guest: /mnt/a }\n  - { host: ./c, guest: /mnt/a/b }\n  - { host: ./d, guest: /mnt/a }\n",
    );
    expect(issueAt(error, "mounts.0.guest").message).toMatch(/would cover the workspace \/srv\/app/);
    expect(issueAt(error, "mounts.2.guest").message).toMatch(/overlaps `mounts.1.guest`/);
    expect(issueAt(error, "mounts.3.guest").message).toMatch(/overlaps `mounts.1.guest`/);
    expect(error.issues).toHaveLength(3);
  });

  test("a mount under the workspace is fine", () => {
    expect(parseConfig("version: 1\nmounts: [{ host: ./a, guest: /workspace/docs }]\n").mounts).toHaveLength(1);
  });

  test(`at most ${LIMITS.mountsMax}`, () => {
    const many = Array.from({ length: LIMITS.mountsMax + 1 }, (_, i) => `  - { host: ./a, guest: /mnt/m${i} }`);
    expect(issueAt(rejection(`version: 1\nmounts:\n${many.join("\n")}\n`), "mounts").message).toMatch(
      /at most 16 mounts/,
    );
  });
});

test("the JSON Schema documents both keys with an example", () => {
  const schema = sandboxJsonSchema() as { properties: Record<string, Record<string, unknown>> };
  const network = schema.properties.network as { properties: Record<string, Record<string, unknown>> };
  expect(network.properties.secrets!.examples).toEqual([
    { GITHUB_TOKEN: { from: "env:GITHUB_TOKEN", hosts: ["api.github.com"] } },
  ]);
  expect(network.properties.secrets!.maxProperties).toBe(LIMITS.secretsMax);
  expect(schema.properties.mounts!.examples).toEqual([[{ host: "./docs", guest: "/mnt/docs" }]]);
});
