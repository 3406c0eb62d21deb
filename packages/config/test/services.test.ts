// A service's keys in sandbox.yaml (command, cwd, port, env, health, timeoutMs, preview, previews,
// platforms): their defaults, and each mistake reported at its key in words a person understands.
import { hasPreview, parseConfig } from "../src/index.js";
import { issueAt, onlyIssue, rejection, withService } from "./support/helpers.js";

const web = (lines: string) => parseConfig(withService(lines)).services.web!;

describe("service names", () => {
  test.each(["web", "a", "0", "api-2", "x".repeat(32)])("%s is accepted", (name) => {
    expect(Object.keys(parseConfig(withService("port: 80", name)).services)).toEqual([name]);
  });

  test.each(["Web", "-web", "web_1", "x".repeat(33), "wéb", "a.b"])("%s is rejected at its key", (name) => {
    const issue = onlyIssue(withService("port: 80", name));
    const key = name.includes(".") ? JSON.stringify(name) : name; // dotted keys are quoted in paths
    expect(issue).toMatchObject({ path: `services.${key}`, line: 3, column: 3 });
    expect(issue.message).toContain("is not a valid service name; use 1–32 lowercase letters, digits or hyphens");
  });

  test("a service must be a mapping", () => {
    expect(onlyIssue("version: 1\nservices:\n  web: run\n").message).toBe(
      '`services.web` must be a mapping of keys and values; got "run"',
    );
  });
});

describe("service defaults", () => {
  test("every optional key gets its documented default", () => {
    expect(web("")).toEqual({
      name: "web",
      command: "run",
      cwd: ".",
      env: {},
      health: { kind: "tcp" },
      timeoutMs: 30000,
      previews: [],
      platforms: ["linux", "darwin"],
    });
  });
});

describe("command", () => {
  test("is trimmed", () => {
    expect(parseConfig("version: 1\nservices:\n  web:\n    command: |\n      npm start\n").services.web!.command).toBe(
      "npm start",
    );
  });

  test("is required", () => {
    expect(onlyIssue("version: 1\nservices:\n  web:\n    port: 80\n")).toMatchObject({
      path: "services.web.command",
      line: 3,
      column: 3,
      message: "`services.web.command` is required; give the foreground shell command that runs the service",
    });
  });

  test.each(['""', "'   '", "[a, b]", "42"])("%s is rejected", (value) => {
    expect(onlyIssue(`version: 1\nservices:\n  web:\n    command: ${value}\n`).path).toBe("services.web.command");
  });
});

describe("cwd", () => {
  test.each([
    ["app", "app"],
    ["./app/", "app"],
    ["a/../b", "b"],
    [".", "."],
    ["''", "."],
    ["a/b/..", "a"],
  ])("%s is normalised to %s", (value, expected) => expect(web(`cwd: ${value}`).cwd).toBe(expected));

  test("an absolute path is rejected", () => {
    expect(onlyIssue(withService("cwd: /etc")).message).toBe(
      '`services.web.cwd` must be relative to the workspace (like app or services/api), not an absolute path; got "/etc"',
    );
  });

  test.each(["..", "../x", "a/../../x", "./.."])("%s escapes the workspace and is rejected", (value) => {
    expect(onlyIssue(withService(`cwd: ${value}`)).message).toContain("must stay inside the workspace");
  });
});

describe("port", () => {
  test("is optional and kept when given", () => {
    expect(web("").port).toBeUndefined();
    expect(web("port: 1").port).toBe(1);
    expect(web("port: 65535").port).toBe(65535);
  });

  test("out of range reads like a person wrote it", () => {
    expect(onlyIssue(withService("port: 70000"))).toEqual({
      path: "services.web.port",
      message: "`services.web.port` must be between 1 and 65535; got 70000",
      line: 5,
      column: 11,
    });
  });

  test.each(["0", "-1", "80.5", "'80'", "http"])("%s is rejected", (value) => {
    expect(onlyIssue(withService(`port: ${value}`)).path).toBe("services.web.port");
  });

  test("fixed ports must be unique across services; the later one is reported", () => {
    const text =
      "version: 1\nservices:\n  web:\n    command: a\n    port: 3000\n  api:\n    command: b\n    port: 3000\n";
    expect(onlyIssue(text)).toEqual({
      path: "services.api.port",
      message:
        "`services.api.port` 3000 is already the port of service web; fixed ports must be unique, so change one or omit it to get a free port",
      line: 8,
      column: 11,
    });
  });

  test("services without ports do not clash", () => {
    const text = "version: 1\nservices:\n  a: { command: x }\n  b: { command: y }\n";
    expect(Object.keys(parseConfig(text).services)).toEqual(["a", "b"]);
  });
});

describe("env", () => {
  test("keeps string values as written", () => {
    expect(web('env:\n  NODE_ENV: production\n  _X1: ""\n  lower: "8080"').env).toEqual({
      NODE_ENV: "production",
      _X1: "",
      lower: "8080",
    });
  });

  test("a non-string value is rejected with a hint to quote it", () => {
    expect(onlyIssue(withService("env:\n  DEBUG: true")).message).toBe(
      '`services.web.env.DEBUG` must be a string; quote numbers and booleans (like "8080"); got true',
    );
  });

  test.each(["1ABC", "A-B", "A B"])("the name %s is rejected at the key", (name) => {
    const issue = onlyIssue(withService(`env:\n  "${name}": x`));
    const key = name.includes(" ") ? JSON.stringify(name) : name; // keys with spaces are quoted in paths
    expect(issue).toMatchObject({ path: `services.web.env.${key}`, line: 6, column: 7 });
    expect(issue.message).toContain("is not a valid environment variable name");
  });

  test("PORT and PUBLIC_URL may not be set, with or without a preview", () => {
    const error = rejection(withService("preview: true\nenv:\n  PORT: '1'\n  PUBLIC_URL: x"));
    expect(issueAt(error, "services.web.env.PORT").message).toBe(
      "`services.web.env.PORT` cannot be set here: pi-sandbox sets PORT to the service's port itself; remove it (use `port:` to fix the port)",
    );
    expect(issueAt(error, "services.web.env.PUBLIC_URL").message).toContain("pi-sandbox sets PUBLIC_URL");
    expect(onlyIssue(withService("env:\n  PUBLIC_URL: x")).path).toBe("services.web.env.PUBLIC_URL");
  });

  test("must be a mapping", () => {
    expect(onlyIssue(withService("env: [A=1]")).message).toBe(
      "`services.web.env` must be a mapping of keys and values; got a list",
    );
  });
});

describe("health", () => {
  test.each([
    ["", { kind: "tcp" }],
    ["health: /", { kind: "http", path: "/" }],
    ["health: /api/health?x=1", { kind: "http", path: "/api/health?x=1" }],
    ["health: process", { kind: "process" }],
  ])("%j gives %j", (line, expected) => expect(web(line).health).toEqual(expected));

  test.each(["health", "tcp", "'/a b'", "true", "http://x/"])("%s is rejected", (value) => {
    expect(onlyIssue(withService(`health: ${value}`)).message).toMatch(
      /^`services\.web\.health` must be an HTTP path starting with \/ \(like \/health\) or "process"; omit it for a TCP check; got /,
    );
  });
});

describe("timeoutMs", () => {
  test("defaults to 30000 and accepts a positive integer", () => {
    expect(web("").timeoutMs).toBe(30000);
    expect(web("timeoutMs: 1").timeoutMs).toBe(1);
  });
  test.each(["0", "-5", "1.5", "'10s'"])("%s is rejected", (value) => {
    expect(onlyIssue(withService(`timeoutMs: ${value}`)).path).toBe("services.web.timeoutMs");
  });
});

describe("preview", () => {
  test("true links / titled with the service name", () => {
    expect(web("preview: true").preview).toEqual({ url: "/", title: "web" });
  });

  test("a mapping fills url and title defaults", () => {
    expect(web("preview: {}").preview).toEqual({ url: "/", title: "web" });
    expect(web("preview: { description: Main app }").preview).toEqual({
      url: "/",
      title: "web",
      description: "Main app",
    });
    expect(web("preview: { url: /app, title: App }").preview).toEqual({ url: "/app", title: "App" });
  });

  test.each(["false", "yes", "[/]"])("%s is rejected", (value) => {
    expect(onlyIssue(withService(`preview: ${value}`)).message).toMatch(
      /^`services\.web\.preview` must be true or a mapping with optional url, title and description; omit it for no preview; got /,
    );
  });

  test("an unknown key inside the mapping is reported at that key", () => {
    expect(onlyIssue(withService("preview:\n  url: /\n  port: 80"))).toMatchObject({
      path: "services.web.preview.port",
      line: 7,
      column: 7,
    });
  });

  test("no preview means no preview origin", () => {
    expect(hasPreview(web(""))).toBe(false);
    expect(hasPreview(web("preview: true"))).toBe(true);
    expect(hasPreview(web("previews: [{url: /docs, title: Docs}]"))).toBe(true);
  });
});

describe("preview URLs", () => {
  test.each(["/", "/docs", "/docs/a?b=c#d", "http://localhost:3000/x", "https://example.com", "https://[::1]/"])(
    "%s is accepted",
    (url) => expect(web(`preview: { url: "${url}" }`).preview!.url).toBe(url),
  );

  test.each(["docs", "//evil.example", "ftp://x", "/a b", "https://", "javascript:alert(1)", ""])(
    "%j is rejected",
    (url) => {
      const issue = onlyIssue(withService(`preview: { url: "${url}" }`));
      expect(issue.path).toBe("services.web.preview.url");
      expect(issue.message).toContain("must be an app path starting with / (like /docs) or an absolute http(s):// URL");
    },
  );
});

describe("previews", () => {
  test("links and one-level folders are normalised in order", () => {
    const service = web(
      [
        "previews:",
        "  - { url: /docs, title: Docs }",
        "  - folder: Tools",
        "    links:",
        "      - { url: /admin, title: Admin, description: Back office }",
        "      - { url: 'https://example.com', title: Site }",
      ].join("\n"),
    );
    expect(service.previews).toEqual([
      { kind: "link", url: "/docs", title: "Docs" },
      {
        kind: "folder",
        folder: "Tools",
        links: [
          { url: "/admin", title: "Admin", description: "Back office" },
          { url: "https://example.com", title: "Site" },
        ],
      },
    ]);
    expect(service.preview).toBeUndefined();
  });

  test("a link needs url and title", () => {
    const error = rejection(withService("previews:\n  - { url: /docs }\n  - { title: T }"));
    expect(issueAt(error, "services.web.previews.0.title").message).toBe(
      "`services.web.previews.0.title` is required; give the link a title",
    );
    expect(issueAt(error, "services.web.previews.1.url").message).toContain("is required");
    expect(error.issues).toHaveLength(2);
  });

  test("errors in a folder speak about the folder, not about links", () => {
    const error = rejection(withService("previews:\n  - folder: F\n    links:\n      - { url: nope, title: A, x: 1 }"));
    expect(error.issues.map((issue) => issue.path)).toEqual([
      "services.web.previews.0.links.0.url",
      "services.web.previews.0.links.0.x",
    ]);
  });

  test("folders are one level deep", () => {
    const issue = onlyIssue(withService("previews:\n  - folder: F\n    links:\n      - folder: G\n        links: []"));
    expect(issue).toMatchObject({
      path: "services.web.previews.0.links.0",
      message:
        "`services.web.previews.0.links.0` is a folder inside a folder; folders are one level deep, so list {url, title} links here",
      line: 8,
      column: 13,
    });
  });

  test("a folder needs at least one link", () => {
    expect(onlyIssue(withService("previews:\n  - { folder: F, links: [] }")).message).toBe(
      "`services.web.previews.0.links` must list at least one link",
    );
  });

  test("folder names are unique within a service, but may repeat across services", () => {
    const folder = "    previews:\n      - { folder: Docs, links: [{ url: /a, title: A }] }\n";
    const twice = `version: 1\nservices:\n  web:\n    command: a\n${folder}  api:\n    command: b\n${folder}`;
    expect(Object.keys(parseConfig(twice).services)).toEqual(["web", "api"]);

    const issue = onlyIssue(
      withService(`previews:\n${folder.split("\n").slice(1).join("\n")}${folder.split("\n").slice(1).join("\n")}`),
    );
    expect(issue).toMatchObject({
      path: "services.web.previews.1.folder",
      message:
        '`services.web.previews.1.folder` repeats the folder name "Docs"; folder names must be unique within a service',
    });
  });

  test("an entry that is not a mapping is rejected", () => {
    expect(onlyIssue(withService("previews: [/docs]")).message).toBe(
      '`services.web.previews.0` must be a link {url, title, description?} or a folder {folder, links}; got "/docs"',
    );
  });
});

describe("platforms", () => {
  test("defaults to both and keeps a declared subset", () => {
    expect(web("").platforms).toEqual(["linux", "darwin"]);
    expect(web("platforms: [linux]").platforms).toEqual(["linux"]);
    expect(web("platforms: [darwin, linux, darwin]").platforms).toEqual(["linux", "darwin"]);
  });

  test("an empty list is rejected", () => {
    expect(onlyIssue(withService("platforms: []")).message).toBe(
      "`services.web.platforms` must list at least one platform (linux or darwin); omit the key to run everywhere",
    );
  });

  test("an unknown platform is rejected at its index", () => {
    expect(onlyIssue(withService("platforms: [linux, windows]"))).toMatchObject({
      path: "services.web.platforms.1",
      message: '`services.web.platforms.1` must be "linux" or "darwin"; got "windows"',
    });
  });

  test("a darwin-only service is declared but not started on the Linux guest", () => {
    const config = parseConfig(
      "version: 1\nservices:\n  mac: { command: a, platforms: [darwin] }\n  web: { command: b }\n",
    );
    expect(Object.keys(config.services)).toEqual(["mac", "web"]);
    expect(config.serviceOrder).toEqual(["web"]);
  });
});

describe("unknown keys in a service", () => {
  test("every one is reported, with suggestions", () => {
    const error = rejection(withService("comand: x\nports: 80\nwhatever: 1"));
    expect(error.issues.map((issue) => [issue.path, issue.line, issue.column])).toEqual([
      ["services.web.comand", 5, 5],
      ["services.web.ports", 6, 5],
      ["services.web.whatever", 7, 5],
    ]);
    expect(issueAt(error, "services.web.ports").message).toBe(
      "`services.web.ports` is not a known key; did you mean `port`?",
    );
    expect(issueAt(error, "services.web.whatever").message).toContain(
      "the keys allowed here are command, cwd, port, env, health, timeoutMs, preview, previews, platforms",
    );
  });
});

describe("Amp-only features", () => {
  test("review: true is rejected as not existing locally", () => {
    expect(onlyIssue(withService("review: true"))).toEqual({
      path: "services.web.review",
      message:
        "`services.web.review` is an Amp review-widget setting that does not exist in a local sandbox; remove it",
      line: 5,
      column: 5,
    });
  });

  test("an AMP_THREAD_ID env entry is rejected", () => {
    expect(onlyIssue(withService("env:\n  AMP_THREAD_ID: t-1"))).toMatchObject({
      path: "services.web.env.AMP_THREAD_ID",
      message:
        "`services.web.env.AMP_THREAD_ID` is an Amp thread variable that does not exist in a local sandbox; remove it",
    });
  });

  test.each([
    ["preview: { title: 'Hi $AMP_USER_EMAIL' }", "services.web.preview.title"],
    ["preview: { description: 'for ${AMP_USER_EMAIL}' }", "services.web.preview.description"],
    ["preview: { url: '/u/$AMP_USER_EMAIL' }", "services.web.preview.url"],
    ["previews: [{ url: /, title: '$AMP_USER_EMAIL' }]", "services.web.previews.0.title"],
    ["previews: [{ folder: '$AMP_USER_EMAIL', links: [{ url: /, title: a }] }]", "services.web.previews.0.folder"],
    [
      "previews: [{ folder: f, links: [{ url: /, title: a, description: $AMP_USER_EMAIL }] }]",
      "services.web.previews.0.links.0.description",
    ],
  ])("$AMP_USER_EMAIL in %s is rejected", (line, path) => {
    const issue = onlyIssue(withService(line));
    expect(issue.path).toBe(path);
    expect(issue.message).toContain(
      "uses $AMP_USER_EMAIL, an Amp identity placeholder that does not exist in a local sandbox",
    );
  });
});
