// What a sandbox.yaml reaches on the host, found from the marks on its schema: every key that
// names a host path, port or credential is marked, and a config's reaches are listed from them.
import * as v from "valibot";
import { configReaches, describeReaches, parseConfig, reaches, reachesNothing, unmarkedKeys } from "../src/index.js";
import { sandboxConfigSchema } from "../src/schema.js";

test("every key of sandbox.yaml that names a host path, a port or a credential carries a mark", () => {
  expect(unmarkedKeys(sandboxConfigSchema)).toEqual([]);
});

test("a new key that sounds like it reaches the host and has no mark is found", () => {
  const schema = v.strictObject({
    network: v.strictObject({
      dockerSocket: v.pipe(v.string(), v.description("A host file the guest may connect to")),
      hostPorts: v.pipe(v.array(v.number()), reaches("host-port", "opens", "port")),
      guestPort: v.pipe(v.number(), reachesNothing("a guest port")),
    }),
    extras: v.array(v.strictObject({ credentialFile: v.string() })),
  });
  expect(unmarkedKeys(schema)).toEqual(["network.dockerSocket", "extras.<n>.credentialFile"]);
});

const EVERYTHING = `version: 1
image: ./images/dev
network:
  allowedHosts: [api.github.com]
  hostPorts: [6379, 9222]
  secrets:
    TOKEN:
      from: env:GITHUB_TOKEN
      hosts: [api.github.com]
      headers: [x-token]
      placeholderFrom: file:~/.ssh/id_ed25519
mounts:
  - { host: ~/.ssh, guest: /mnt/ssh }
`;

test("a config's reaches are found from the marks, with their resolved values", () => {
  const config = parseConfig(EVERYTHING, { sourcePath: "/home/u/project/sandbox.yaml" });
  const found = configReaches(config).map((r) => [r.key.join("."), r.kind, r.given]);
  expect(found).toEqual([
    ["image", "boot-asset", "/home/u/project/images/dev"],
    ["network.hostPorts", "host-port", [6379, 9222]],
    ["network.secrets.TOKEN.from", "credential", "env:GITHUB_TOKEN"],
    ["network.secrets.TOKEN.hosts", "credential", ["api.github.com"]],
    ["network.secrets.TOKEN.headers", "credential", ["x-token"]],
    ["network.secrets.TOKEN.placeholderFrom", "host-file-read", "file:~/.ssh/id_ed25519"],
    ["mounts.0.host", "mount", "~/.ssh"],
  ]);
});

test("the description lists each entry once, most severe first, every value on one printable line", () => {
  const config = parseConfig(EVERYTHING, { sourcePath: "/home/u/project/sandbox.yaml" });
  expect(describeReaches(configReaches(config))).toEqual([
    "network.secrets.TOKEN (credential, host file read): value from env:GITHUB_TOKEN, sent to api.github.com, also in headers x-token, guest's placeholder read from file:~/.ssh/id_ed25519",
    "mounts.0 (mount): shares host directory ~/.ssh",
    "network.hostPorts (host port): opens to the guest the host's 127.0.0.1 ports 6379, 9222",
    "image (boot asset): boots the image in /home/u/project/images/dev",
  ]);
  const hostile = parseConfig(
    'version: 1\nnetwork:\n  secrets:\n    T: { from: "file:./a\\u001b[8mb", hosts: [x.example] }\n  allowedHosts: [x.example]\n',
    {
      sourcePath: "/p/sandbox.yaml",
    },
  );
  expect(describeReaches(configReaches(hostile))[0]).toContain("file:/p/a\\x1b[8mb");
});

test("an image named from the image store and an empty hostPorts reach nothing", () => {
  const config = parseConfig("version: 1\nimage: node-dev\nnetwork: { hostPorts: [] }\n");
  expect(configReaches(config)).toEqual([]);
});
