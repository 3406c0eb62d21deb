// The top-level keys of sandbox.yaml (version, profile and resources, diskGiB, workspace, image,
// setup and resume, network): defaults, accepted forms, and each mistake reported where it is.
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { CONFIG_DEFAULTS, LIMITS, PROFILES, isImageName, parseConfig } from "../src/index.js";
import { issueAt, onlyIssue, rejection } from "./support/helpers.js";

describe("version", () => {
  test("1 is accepted", () => expect(parseConfig("version: 1").version).toBe(1));

  test.each(["2", "0", '"1"', "1.5"])("%s is rejected", (value) => {
    const issue = onlyIssue(`version: ${value}\n`);
    expect(issue).toMatchObject({ path: "version", line: 1, column: 10 });
    expect(issue.message).toMatch(/^`version` must be 1, the only supported version; got /);
  });

  test("a missing version is reported", () => {
    expect(onlyIssue("profile: tiny\n")).toMatchObject({
      path: "version",
      message: expect.stringContaining("is required"),
    });
  });
});

describe("profile and resources", () => {
  test("defaults to small (2 CPUs, 4 GiB)", () => {
    const config = parseConfig("version: 1");
    expect(config.profile).toBe("small");
    expect(config.resources).toEqual({ cpus: 2, memoryGiB: 4 });
  });

  test.each([
    ["tiny", 1, 2],
    ["small", 2, 4],
    ["medium", 4, 8],
    ["large", 8, 16],
    ["xlarge", 16, 32],
  ])("%s gives %i CPUs and %i GiB", (profile, cpus, memoryGiB) => {
    expect(parseConfig(`version: 1\nprofile: ${profile}`).resources).toEqual({ cpus, memoryGiB });
    expect(PROFILES[profile as keyof typeof PROFILES]).toEqual({ cpus, memoryGiB });
  });

  test("an unknown profile names the choices", () => {
    expect(onlyIssue("version: 1\nprofile: huge\n").message).toBe(
      '`profile` must be one of tiny, small, medium, large, xlarge; got "huge"',
    );
  });

  test("resources override both values", () => {
    const config = parseConfig("version: 1\nprofile: tiny\nresources: { cpus: 3, memoryGiB: 5 }");
    expect(config).toMatchObject({ profile: "tiny", resources: { cpus: 3, memoryGiB: 5 } });
  });

  test("resources may override one value and keep the profile's other", () => {
    expect(parseConfig("version: 1\nprofile: large\nresources: { cpus: 2 }").resources).toEqual({
      cpus: 2,
      memoryGiB: 16,
    });
    expect(parseConfig("version: 1\nresources: { memoryGiB: 3 }").resources).toEqual({ cpus: 2, memoryGiB: 3 });
  });

  test.each([
    ["cpus: 0", "resources.cpus"],
    ["cpus: 1.5", "resources.cpus"],
    ["memoryGiB: -1", "resources.memoryGiB"],
    ["memoryGiB: lots", "resources.memoryGiB"],
    ["disk: 3", "resources.disk"],
  ])("resources { %s } is rejected at %s", (body, path) => {
    expect(onlyIssue(`version: 1\nresources: { ${body} }\n`).path).toBe(path);
  });
});

describe("diskGiB", () => {
  test("defaults to 60", () => expect(parseConfig("version: 1").diskGiB).toBe(60));
  test("accepts an integer of at least 2", () => expect(parseConfig("version: 1\ndiskGiB: 2").diskGiB).toBe(2));
  test.each(["1", "2.5", "big", "-4"])("rejects %s", (value) => {
    expect(onlyIssue(`version: 1\ndiskGiB: ${value}\n`)).toMatchObject({ path: "diskGiB", line: 2, column: 10 });
  });
});

describe("workspace", () => {
  test("defaults to /workspace", () => expect(parseConfig("version: 1").workspace).toBe(CONFIG_DEFAULTS.workspace));
  test("accepts and normalises an absolute path", () => {
    expect(parseConfig("version: 1\nworkspace: /srv//app/").workspace).toBe("/srv/app");
  });
  test.each(["workspace", "./ws", "/srv/../etc", "''"])("rejects %s", (value) => {
    expect(onlyIssue(`version: 1\nworkspace: ${value}\n`).path).toBe("workspace");
  });
});

describe("image", () => {
  test("is undefined unless given", () => expect(parseConfig("version: 1").image).toBeUndefined());

  test("a relative path is resolved against the YAML file's directory", () => {
    const config = parseConfig("version: 1\nimage: ../assets/guest\n", { sourcePath: "/home/u/project/sandbox.yaml" });
    expect(config.image).toBe("/home/u/assets/guest");
  });

  test("an absolute path stays as written", () => {
    expect(parseConfig("version: 1\nimage: /opt/images/a\n", { sourcePath: "/x/sandbox.yaml" }).image).toBe(
      "/opt/images/a",
    );
  });

  test("without a source path it is resolved against the working directory", () => {
    expect(parseConfig("version: 1\nimage: ./assets\n").image).toBe(resolve("assets"));
  });

  test("a bare word following the name rule is a built image's name, kept as written", () => {
    expect(parseConfig("version: 1\nimage: node-dev\n", { sourcePath: "/x/sandbox.yaml" }).image).toBe("node-dev");
  });

  test("a path starting with ~/ starts from the home directory", () => {
    expect(parseConfig("version: 1\nimage: ~/images/dev\n").image).toBe(join(homedir(), "images/dev"));
  });

  test("a word that is neither a name nor a path is refused with both forms in the message", () => {
    const issue = onlyIssue("version: 1\nimage: My_Image\n");
    expect(issue.path).toBe("image");
    expect(issue.message).toMatch(/image name .* or a path containing \//);
  });

  test.each(['""', "3", "[a]"])("rejects %s", (value) => {
    expect(onlyIssue(`version: 1\nimage: ${value}\n`).path).toBe("image");
  });
});

describe("setup and resume", () => {
  test("default to empty lists", () => {
    expect(parseConfig("version: 1")).toMatchObject({ setup: [], resume: [] });
  });

  test("keep the commands in order", () => {
    const config = parseConfig("version: 1\nsetup:\n  - apt-get update\n  - make\nresume: [./start.sh]\n");
    expect(config.setup).toEqual(["apt-get update", "make"]);
    expect(config.resume).toEqual(["./start.sh"]);
  });

  test("reject a command that is not a string, at its index", () => {
    const error = rejection("version: 1\nsetup:\n  - ok\n  - { a: 1 }\nresume: make\n");
    expect(issueAt(error, "setup.1")).toMatchObject({ line: 4, column: 5 });
    expect(issueAt(error, "resume").message).toBe('`resume` must be a list of shell commands; got "make"');
  });
});

describe("network.allowedHosts", () => {
  test("defaults to an empty list (all outbound blocked)", () => {
    expect(parseConfig("version: 1").network).toEqual({ allowedHosts: [], hostPorts: [], secrets: {} });
    expect(parseConfig("version: 1\nnetwork: {}").network).toEqual({ allowedHosts: [], hostPorts: [], secrets: {} });
  });

  test("accepts exact hosts and *. wildcards, lowercased and deduplicated", () => {
    const config = parseConfig(
      "version: 1\nnetwork:\n  allowedHosts: [registry.npmjs.org, '*.GitHub.com', localhost, 10.0.0.1, '*.github.com']\n",
    );
    expect(config.network.allowedHosts).toEqual(["registry.npmjs.org", "*.github.com", "localhost", "10.0.0.1"]);
  });

  test.each([
    "'*'",
    "'*.'",
    "'a.*.com'",
    "'http://x.com'",
    "'x.com/path'",
    "'-bad.com'",
    "'x..com'",
    "'x.com:443'",
    "'a b'",
  ])("rejects %s", (host) => {
    const issue = onlyIssue(`version: 1\nnetwork:\n  allowedHosts: [ok.com, ${host}]\n`);
    expect(issue.path).toBe("network.allowedHosts.1");
    expect(issue.message).toContain("must be a host name like registry.npmjs.org or a wildcard like *.example.com");
  });

  test("an unknown key under network is rejected", () => {
    expect(onlyIssue("version: 1\nnetwork:\n  allowed: [x.com]\n")).toMatchObject({
      path: "network.allowed",
      line: 3,
      column: 3,
      message: "`network.allowed` is not a known key; the keys allowed here are allowedHosts, hostPorts, secrets",
    });
  });
});

describe("network.hostPorts", () => {
  test("defaults to an empty list (no host service reachable)", () => {
    expect(parseConfig("version: 1\nnetwork: { allowedHosts: [a.com] }").network.hostPorts).toEqual([]);
    expect(CONFIG_DEFAULTS.hostPorts).toEqual([]);
  });

  test("accepts whole port numbers 1-65535, kept in the order written, next to allowedHosts", () => {
    const config = parseConfig("version: 1\nnetwork:\n  allowedHosts: [a.com]\n  hostPorts: [8000, 1, 65535, 5432]\n");
    expect(config.network).toEqual({ allowedHosts: ["a.com"], hostPorts: [8000, 1, 65535, 5432], secrets: {} });
    expect(parseConfig("version: 1\nnetwork:\n  hostPorts: []\n").network.hostPorts).toEqual([]);
  });

  test(`accepts ${LIMITS.hostPortsMax} ports and refuses one more, at the key`, () => {
    const ports = (n: number) => Array.from({ length: n }, (_, i) => 8000 + i).join(", ");
    expect(
      parseConfig(`version: 1\nnetwork:\n  hostPorts: [${ports(LIMITS.hostPortsMax)}]\n`).network.hostPorts,
    ).toHaveLength(LIMITS.hostPortsMax);
    expect(onlyIssue(`version: 1\nnetwork:\n  hostPorts: [${ports(LIMITS.hostPortsMax + 1)}]\n`)).toEqual({
      path: "network.hostPorts",
      line: 3,
      column: 14,
      message: `\`network.hostPorts\` must list at most ${LIMITS.hostPortsMax} ports; got ${LIMITS.hostPortsMax + 1}. List only the host services the guest needs`,
    });
  });

  test("a repeated port is refused at the repeat, with the first one named", () => {
    const error = rejection("version: 1\nnetwork:\n  hostPorts:\n    - 8000\n    - 9000\n    - 8000\n    - 9000\n");
    expect(error.issues).toEqual([
      {
        path: "network.hostPorts.2",
        line: 6,
        column: 7,
        message: "`network.hostPorts.2` repeats port 8000 (already `network.hostPorts.0`); list each host port once",
      },
      {
        path: "network.hostPorts.3",
        line: 7,
        column: 7,
        message: "`network.hostPorts.3` repeats port 9000 (already `network.hostPorts.1`); list each host port once",
      },
    ]);
  });

  test.each([
    ["0", "0"],
    ["65536", "65536"],
    ["-1", "-1"],
    ["80.5", "80.5"],
    ['"8000"', '"8000"'],
    ["localhost:8000", '"localhost:8000"'],
    ["true", "true"],
    ["{ port: 1 }", "a mapping"],
  ])("refuses the entry %s with its path, line and column", (entry, got) => {
    expect(onlyIssue(`version: 1\nnetwork:\n  hostPorts: [8000, ${entry}]\n`)).toEqual({
      path: "network.hostPorts.1",
      line: 3,
      column: 21,
      message: `\`network.hostPorts.1\` must be a whole number between 1 and 65535 (a TCP port on the host's 127.0.0.1); got ${got}`,
    });
  });

  test.each([
    ["8000", "8000"],
    ['"8000"', '"8000"'],
    ["{ a: 1 }", "a mapping"],
  ])("refuses a hostPorts that is not a list (%s)", (value, got) => {
    expect(onlyIssue(`version: 1\nnetwork:\n  hostPorts: ${value}\n`)).toEqual({
      path: "network.hostPorts",
      line: 3,
      column: 14,
      message: `\`network.hostPorts\` must be a list of host port numbers such as [8000]; got ${got}`,
    });
  });

  test("every problem of the list is reported at once", () => {
    const error = rejection("version: 1\nnetwork:\n  hostPorts: [0, 8000, 8000, x]\n");
    expect(error.issues.map((issue) => issue.path)).toEqual([
      "network.hostPorts.0",
      "network.hostPorts.2",
      "network.hostPorts.3",
    ]);
  });
});

describe("unknown keys", () => {
  test("every unknown top-level key is reported, with a suggestion for near misses", () => {
    const error = rejection("version: 1\nprofle: tiny\nextra: 1\nmore: 2\n");
    expect(error.issues.map((issue) => issue.path)).toEqual(["profle", "extra", "more"]);
    expect(issueAt(error, "profle").message).toBe("`profle` is not a known key; did you mean `profile`?");
    expect(issueAt(error, "extra").message).toContain("the keys allowed at the top level are version, profile");
  });

  test("a key differing only in case suggests the right spelling", () => {
    expect(onlyIssue("version: 1\ndiskgib: 10\n").message).toBe(
      "`diskgib` is not a known key; did you mean `diskGiB`?",
    );
  });

  test("the document root must be a mapping", () => {
    expect(onlyIssue("- a\n- b\n")).toMatchObject({
      path: "",
      message: "the file must be a YAML mapping with keys such as version and services; got a list",
    });
  });

  test("an empty file reports the missing version", () => {
    expect(onlyIssue("# nothing here\n")).toMatchObject({ path: "version", line: 1, column: 1 });
  });
});

describe("services map", () => {
  test("defaults to no services", () => {
    expect(parseConfig("version: 1")).toMatchObject({ services: {}, serviceOrder: [] });
  });

  test("must be a mapping", () => {
    expect(onlyIssue("version: 1\nservices: [web]\n").message).toBe(
      "`services` must be a mapping of service names to services; got a list",
    );
  });
});

test("the image pattern and the name rule agree on every bare word", () => {
  for (const word of ["default", "a", "node-dev", "x".repeat(40), "A", "1abc", "my_image", "x".repeat(41)]) {
    let accepted = true;
    try {
      parseConfig(`version: 1\nimage: ${word}\n`);
    } catch {
      accepted = false;
    }
    expect([word, accepted]).toEqual([word, isImageName(word)]);
  }
});
