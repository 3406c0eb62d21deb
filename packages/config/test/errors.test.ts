// How a broken sandbox.yaml is reported: every problem once, in document order, with its line and
// column; YAML syntax errors, alias bombs and the 1 MiB limit refused before they cost anything.
import { ConfigError, formatConfigIssue, isConfigError, LIMITS, parseConfig } from "../src/index.js";
import { rejection } from "./support/helpers.js";

const BROKEN = `version: 1
profile: huge
diskGiB: 1
services:
  web:
    command: python3 -m http.server $PORT
    port: 70000
    colour: blue
  api:
    port: 8080
`;

describe("multi-error reporting", () => {
  test("every problem is reported once, in document order, with its line and column", () => {
    const error = rejection(BROKEN, "/p/sandbox.yaml");
    expect(error.code).toBe("CONFIG_INVALID");
    expect(error.issues.map(({ path, line, column }) => ({ path, line, column }))).toEqual([
      { path: "profile", line: 2, column: 10 },
      { path: "diskGiB", line: 3, column: 10 },
      { path: "services.web.port", line: 7, column: 11 },
      { path: "services.web.colour", line: 8, column: 5 },
      { path: "services.api.command", line: 9, column: 3 },
    ]);
  });

  test("the message names the file and lists every problem on its own line", () => {
    const error = rejection(BROKEN, "/p/sandbox.yaml");
    expect(error.message.split("\n")).toEqual([
      "/p/sandbox.yaml is not a valid sandbox.yaml (5 problems):",
      '  `profile` must be one of tiny, small, medium, large, xlarge; got "huge" (line 2, column 10)',
      "  `diskGiB` must be at least 2 GiB; got 1 (line 3, column 10)",
      "  `services.web.port` must be between 1 and 65535; got 70000 (line 7, column 11)",
      "  `services.web.colour` is not a known key; the keys allowed here are command, cwd, port, env, health, timeoutMs, preview, previews, platforms (line 8, column 5)",
      "  `services.api.command` is required; give the foreground shell command that runs the service (line 9, column 3)",
    ]);
    expect(error.hint).toContain("README");
    expect(error.details).toEqual({ sourcePath: "/p/sandbox.yaml" });
  });

  test("structural and cross-field problems are reported together", () => {
    const error = rejection(
      "version: 1\nservices:\n  a: { command: x, port: 80 }\n  b: { command: y, port: 80, cwd: /abs }\n  c: { command: z, env: { U: '${services.q.publicURL}' } }\n",
    );
    expect(error.issues.map((issue) => issue.path)).toEqual(["services.b.port", "services.b.cwd", "services.c.env.U"]);
  });

  test("a value breaking several checks yields one sentence", () => {
    expect(rejection("version: 1\nservices:\n  web: { command: x, port: -0.5 }\n").issues).toHaveLength(1);
  });

  test("positions follow YAML aliases to the anchored node", () => {
    const error = rejection("version: 1\nx-base: &base\n  command: run\n  port: 0\nservices:\n  web: *base\n");
    expect(error.issues.map(({ path, line, column }) => ({ path, line, column }))).toEqual([
      { path: "x-base", line: 2, column: 1 },
      { path: "services.web.port", line: 4, column: 9 },
    ]);
  });
});

describe("YAML syntax errors", () => {
  test("a duplicate key is a syntax error naming the key", () => {
    const error = rejection("version: 1\nservices:\n  web:\n    command: a\n    command: b\n");
    expect(error.code).toBe("CONFIG_YAML_SYNTAX");
    expect(error.issues).toEqual([
      {
        path: "",
        message: "the key `command` appears more than once in the same mapping; keep only one",
        line: 5,
        column: 5,
      },
    ]);
  });

  test("every syntax error is reported", () => {
    const error = rejection("version: 1\nversion: 1\na: [1\nb: 2\n");
    expect(error.code).toBe("CONFIG_YAML_SYNTAX");
    expect(error.issues.length).toBeGreaterThanOrEqual(2);
    expect(error.message.split("\n")).toHaveLength(error.issues.length + 1);
  });

  test("several documents in one file are refused", () => {
    expect(rejection("version: 1\n---\nversion: 1\n").issues[0]!.message).toBe(
      "the file holds more than one YAML document (a second ---); keep one",
    );
  });

  test("tabs and bad indentation carry positions", () => {
    const error = rejection("version: 1\nservices:\n\tweb: {}\n");
    expect(error.code).toBe("CONFIG_YAML_SYNTAX");
    expect(error.issues[0]).toMatchObject({ line: 3, column: 1 });
    expect(error.issues[0]!.message).toMatch(/^YAML syntax: /);
  });

  test("an alias to an undefined anchor is a syntax error at the alias", () => {
    const error = rejection("version: 1\nservices: *nope\n");
    expect(error.code).toBe("CONFIG_YAML_SYNTAX");
    expect(error.issues[0]).toMatchObject({ line: 2, column: 11 });
  });

  test("alias expansion is bounded (billion laughs)", () => {
    let text = "version: 1\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (let level = 1; level < 8; level++) {
      const previous = `*a${level - 1}`;
      text += `a${level}: &a${level} [${Array(10).fill(previous).join(", ")}]\n`;
    }
    const started = Date.now();
    const error = rejection(text);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(error.code).toBe("CONFIG_YAML_SYNTAX");
    expect(error.issues[0]!.message).toContain(`more than ${LIMITS.yamlMaxAliasCount} times`);
  });

  test("a few aliases are fine", () => {
    const config = parseConfig("version: 1\nsetup: &cmds [make]\nresume: *cmds\n");
    expect(config.resume).toEqual(["make"]);
  });
});

describe("size limit", () => {
  test("text over 1 MiB is refused before parsing", () => {
    const text = `version: 1\n#${"x".repeat(LIMITS.yamlMaxBytes)}\n`;
    const error = rejection(text);
    expect(error.code).toBe("CONFIG_TOO_LARGE");
    expect(error.message).toContain("at most 1048576 bytes (1 MiB)");
  });

  test("text of exactly 1 MiB is parsed", () => {
    const head = "version: 1\n#";
    const text = head + "x".repeat(LIMITS.yamlMaxBytes - head.length);
    expect(parseConfig(text).version).toBe(1);
  });
});

describe("ConfigError", () => {
  test("is branded so copies of the package recognise it", () => {
    const error = rejection("version: 2\n");
    expect(error).toBeInstanceOf(ConfigError);
    expect(isConfigError(error)).toBe(true);
    expect(isConfigError({ code: "CONFIG_INVALID", issues: [] })).toBe(false);
    expect(isConfigError(new Error("x"))).toBe(false);
    expect(isConfigError(null)).toBe(false);
    expect(error.name).toBe("ConfigError");
  });

  test("formatConfigIssue adds the location only when known", () => {
    expect(formatConfigIssue({ path: "a", message: "`a` is bad", line: 2, column: 3 })).toBe(
      "`a` is bad (line 2, column 3)",
    );
    expect(formatConfigIssue({ path: "", message: "bad" })).toBe("bad");
  });
});
