// Which instance, template and service names are valid, the documented LIMITS and profiles, and a
// hostile sandbox.yaml refused for its size before anything walks it.
import {
  parseConfig,
  assertValidInstanceName,
  ConfigError,
  isValidInstanceName,
  isValidServiceName,
  LIMITS,
  PROFILES,
} from "../src/index.js";

describe("instance and template names", () => {
  test.each(["a", "demo", "web-1", "a".repeat(40), "x-"])("%s is valid", (name) => {
    expect(isValidInstanceName(name)).toBe(true);
    expect(() => assertValidInstanceName(name)).not.toThrow();
  });

  test.each(["", "1abc", "-a", "Demo", "a_b", "a.b", "a".repeat(41), "../x", "a b"])("%j is invalid", (name) => {
    expect(isValidInstanceName(name)).toBe(false);
  });

  test("non-strings are invalid", () => {
    expect(isValidInstanceName(undefined)).toBe(false);
    expect(isValidInstanceName(42)).toBe(false);
  });

  test("assertValidInstanceName throws CONFIG_INVALID_NAME naming the kind", () => {
    let caught: unknown;
    try {
      assertValidInstanceName("Bad Name", "template");
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect(caught).toMatchObject({
      code: "CONFIG_INVALID_NAME",
      message: '"Bad Name" is not a valid template name',
      hint: 'use 1–40 characters: a lowercase letter first, then lowercase letters, digits or hyphens (such as "demo" or "web-1")',
      details: { name: "Bad Name", kind: "template" },
    });
  });
});

describe("service names", () => {
  test.each(["web", "0", "9-a", "a".repeat(32)])("%s is valid", (name) => expect(isValidServiceName(name)).toBe(true));
  test.each(["", "-a", "A", "a_b", "a".repeat(33)])("%j is invalid", (name) =>
    expect(isValidServiceName(name)).toBe(false),
  );
});

describe("LIMITS", () => {
  test("holds the documented limits", () => {
    expect(LIMITS).toEqual({
      yamlMaxBytes: 1048576,
      yamlMaxAliasCount: 100,
      execWaitDefaultMs: 10000,
      execWaitMaxMs: 60000,
      outputMaxBytes: 65536,
      writeMaxBytes: 1048576,
      completedExecHandles: 128,
      setupDeadlineMs: 1200000,
      resumeWaitMs: 10000,
      readinessDefaultMs: 30000,
      adhocReadinessMs: 60000,
      serviceRestartDelayMs: 1000,
      logLinesDefault: 100,
      logLinesMax: 500,
      servicesMax: 64,
      previewsMax: 64,
      hostPortsMax: 16,
      secretsMax: 32,
      secretValueMaxBytes: 65536,
      mountsMax: 16,
      idleSuspendMinMs: 10000,
      idleSuspendMaxMs: 604800000,
      idleCpuPercent: 25,
      idleCpuWindowMs: 5000,
      checkpointEveryMinMs: 30000,
      checkpointEveryMaxMs: 86400000,
      checkpointKeepMax: 500,
      checkpointKeepGiBMax: 4096,
      ledgerKeepDaysMax: 36_500,
    });
  });

  test("is frozen, as is the profile table", () => {
    expect(Object.isFrozen(LIMITS)).toBe(true);
    expect(Object.isFrozen(PROFILES)).toBe(true);
    expect(Object.isFrozen(PROFILES.small)).toBe(true);
  });
});

describe("a hostile sandbox.yaml", () => {
  const services = (n: number) =>
    "version: 1\nservices:\n" +
    Array.from(
      { length: n },
      (_, i) => `  s${i}:\n    command: python3 -m http.server $PORT\n    preview: true\n`,
    ).join("");

  test(`more than ${LIMITS.servicesMax} services are refused, by name of the key, before anything walks them`, () => {
    expect(() => parseConfig(services(LIMITS.servicesMax))).not.toThrow();
    const error = (() => {
      try {
        parseConfig(services(LIMITS.servicesMax + 1));
      } catch (e) {
        return e as ConfigError;
      }
    })();
    expect(error?.code).toBe("CONFIG_INVALID");
    expect(error?.issues).toEqual([
      {
        path: "services",
        message: `declares 65 services; at most ${LIMITS.servicesMax} are allowed per sandbox.yaml`,
        line: 2,
        column: 1,
      },
    ]);
  });

  test("a 1 MiB file of thousands of services is refused for its count; thousands of duplicate keys give a bounded list", () => {
    const big = services(15_000).slice(0, LIMITS.yamlMaxBytes - 16);
    expect(() => parseConfig(big)).toThrow(/declares \d+ services; at most 64/);
    const dupes = "version: 1\nenv:\n" + "  A: x\n".repeat(5_000);
    const error = (() => {
      try {
        parseConfig(dupes);
      } catch (e) {
        return e as ConfigError;
      }
    })();
    expect(error?.code).toBe("CONFIG_YAML_SYNTAX");
    expect(error?.issues.length).toBe(20);
    expect(error?.issues[0]).toMatchObject({
      message: "the key `A` appears more than once in the same mapping; keep only one",
      line: 4,
    });
  });
});
