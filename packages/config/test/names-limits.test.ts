import {
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
      message:
        '"Bad Name" is not a valid template name; use 1–40 characters: a lowercase letter first, then lowercase letters, digits or hyphens',
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
    });
  });

  test("is frozen, as is the profile table", () => {
    expect(Object.isFrozen(LIMITS)).toBe(true);
    expect(Object.isFrozen(PROFILES)).toBe(true);
    expect(Object.isFrozen(PROFILES.small)).toBe(true);
  });
});
