// CodedError, the base of every package's error: what it carries and serialises, and the brand
// that lets another copy of a package recognise its errors.
import {
  CodedError,
  ConfigError,
  brandError,
  defineCodedError,
  hasBrand,
  isCodedError,
  isConfigError,
} from "../src/index.js";

describe("CodedError", () => {
  test("carries code, message, hint, details and cause; toJSON leaves out what is empty", () => {
    const cause = new Error("root");
    const error = new CodedError("X_FAILED", "x failed", { hint: "do y", details: { port: 1 }, cause });
    expect(error).toBeInstanceOf(Error);
    expect(error.cause).toBe(cause);
    expect(error.toJSON()).toEqual({
      name: "CodedError",
      code: "X_FAILED",
      message: "x failed",
      hint: "do y",
      details: { port: 1 },
    });
    expect(JSON.parse(JSON.stringify(new CodedError("X_BARE", "bare")))).toEqual({
      name: "CodedError",
      code: "X_BARE",
      message: "bare",
    });
  });

  test("a package's class keeps its name, code, brand and extra fields, and is a CodedError", () => {
    const error = new ConfigError("CONFIG_NOT_FOUND", "no config file at /p", { hint: "create one" });
    expect(error.name).toBe("ConfigError");
    expect(error.issues).toEqual([]);
    expect(isCodedError(error)).toBe(true);
    expect(isConfigError(error)).toBe(true);
    expect(error.toJSON()).toEqual({
      name: "ConfigError",
      code: "CONFIG_NOT_FOUND",
      message: "no config file at /p",
      hint: "create one",
    });
    // The brands are not enumerable: they stay out of JSON, spreads and equality checks.
    expect(Object.keys(error)).not.toContain(String(Symbol.for("pi-sandbox.ConfigError")));
    expect(Object.getOwnPropertySymbols({ ...error })).toEqual([]);
  });

  test("brands are global symbols, so an error made by another copy of a package is recognised", () => {
    // What another installed copy would make: a different class, the same Symbol.for brands.
    class OtherCopy extends Error {}
    const foreign = new OtherCopy("from another copy");
    brandError(foreign, Symbol.for("pi-sandbox.CodedError"));
    brandError(foreign, Symbol.for("pi-sandbox.ConfigError"));
    expect(isCodedError(foreign)).toBe(true);
    expect(isConfigError(foreign)).toBe(true);
    expect(hasBrand(foreign, Symbol.for("pi-sandbox.VmError"))).toBe(false);
    expect(isCodedError({ code: "CONFIG_INVALID", message: "duck" })).toBe(false);
    expect(isCodedError(null)).toBe(false);
  });

  test("defineCodedError gives a package its class and a guard that knows its brand and, when asked, its code", () => {
    const kind = defineCodedError<"DEMO_A" | "DEMO_B", "DemoError">("DemoError", "DEMO_");
    class DemoError extends kind.Base {}
    const error = new DemoError("DEMO_A", "a failed", { hint: "retry" });
    expect(error.name).toBe("DemoError");
    expect(kind.prefix).toBe("DEMO_");
    expect(isCodedError(error)).toBe(true);
    expect(hasBrand(error, Symbol.for("pi-sandbox.DemoError"))).toBe(true);
    expect(kind.is(error)).toBe(true);
    expect(kind.is(error, "DEMO_A")).toBe(true);
    expect(kind.is(error, "DEMO_B")).toBe(false);
    expect(kind.is(new ConfigError("CONFIG_INVALID", "x"))).toBe(false);
    expect(error.toJSON()).toEqual({ name: "DemoError", code: "DEMO_A", message: "a failed", hint: "retry" });
    expect(isConfigError(new ConfigError("CONFIG_INVALID", "x"), "CONFIG_NOT_FOUND")).toBe(false);
  });
});
