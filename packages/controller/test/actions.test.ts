// What a caller of the JSON API meets: bad JSON, an unknown action, a missing, extra or mistyped
// argument and a broken limit each answered with a coded error naming the fix; help lists them all.
import { ACTIONS, ControllerError, renderHelp, validateAction } from "../src/client/index.js";

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ControllerError);
    return (error as ControllerError).code;
  }
  throw new Error("expected an error");
}

describe("validateAction", () => {
  test.each([[{}], ["{}"], ["help"], [""], ['{"action":"help"}']])("%p means help", (input) => {
    expect(validateAction(input).spec.name).toBe("help");
  });

  test("accepts a full action and keeps its arguments", () => {
    const { spec, args } = validateAction('{"action":"exec","name":"demo","cmd":"ls","timeoutMs":500}');
    expect(spec.name).toBe("exec");
    expect(args).toEqual({ action: "exec", name: "demo", cmd: "ls", timeoutMs: 500 });
  });

  test("invalid JSON is a bad-input error with a hint", () => {
    try {
      validateAction("{not json");
      throw new Error("no error");
    } catch (error) {
      expect((error as ControllerError).code).toBe("CONTROLLER_BAD_INPUT");
      expect((error as ControllerError).hint).toMatch(/\{\} returns help/);
    }
  });

  test("unknown action lists the real ones", () => {
    try {
      validateAction({ action: "launch" });
      throw new Error("no error");
    } catch (error) {
      expect((error as ControllerError).code).toBe("CONTROLLER_UNKNOWN_ACTION");
      expect((error as ControllerError).hint).toContain("exec-status");
    }
  });

  test("extra and mistyped arguments are named, with what the action takes", () => {
    try {
      validateAction({ action: "exec", name: "demo", cmd: 5, colour: "red" });
      throw new Error("no error");
    } catch (error) {
      const e = error as ControllerError;
      expect(e.code).toBe("CONTROLLER_BAD_INPUT");
      expect(e.message).toMatch(/colour/);
      expect(e.message).toMatch(/cmd/);
      expect(e.hint).toMatch(
        /exec takes \{"action":"exec", name: string, cmd: string, cwd\?: string, env\?: object, separateStderr\?: boolean, timeoutMs\?: integer\}/,
      );
    }
  });

  test("a missing argument is called missing, an extra one unexpected", () => {
    const messageOf = (input: unknown) => {
      try {
        validateAction(input);
      } catch (error) {
        return (error as ControllerError).message;
      }
      throw new Error("no error");
    };
    expect(messageOf({ action: "services", name: "demo" })).toBe('services: missing argument "op"');
    expect(messageOf({ action: "stop", name: "demo", colour: "red" })).toBe('stop: unexpected argument "colour"');
  });

  test("limits are enforced", () => {
    expect(codeOf(() => validateAction({ action: "exec", name: "d", cmd: "x", timeoutMs: 60_001 }))).toBe(
      "CONTROLLER_BAD_INPUT",
    );
    expect(codeOf(() => validateAction({ action: "exec", name: "d", cmd: "x", timeoutMs: -1 }))).toBe(
      "CONTROLLER_BAD_INPUT",
    );
    expect(codeOf(() => validateAction({ action: "logs", name: "d", lines: 501 }))).toBe("CONTROLLER_BAD_INPUT");
    expect(codeOf(() => validateAction({ action: "services", name: "d", op: "explode" }))).toBe("CONTROLLER_BAD_INPUT");
  });

  test("exec's env takes variable names and string values", () => {
    expect(validateAction({ action: "exec", name: "d", cmd: "env", env: { A_1: "x y", _B: "" } }).args.env).toEqual({
      A_1: "x y",
      _B: "",
    });
    for (const env of [{ "1A": "x" }, { "A-B": "x" }, { "A=B": "x" }, { "": "x" }, { A: 1 }, { A: "x\0y" }]) {
      expect(codeOf(() => validateAction({ action: "exec", name: "d", cmd: "env", env }))).toBe("CONTROLLER_BAD_INPUT");
    }
  });

  test("create needs exactly one of config and template", () => {
    expect(codeOf(() => validateAction({ action: "create", name: "d" }))).toBe("CONTROLLER_BAD_INPUT");
    expect(codeOf(() => validateAction({ action: "create", name: "d", config: "a", template: "b" }))).toBe(
      "CONTROLLER_BAD_INPUT",
    );
    expect(validateAction({ action: "create", name: "d", template: "b" }).spec.name).toBe("create");
  });
});

describe("help", () => {
  test("lists every model-facing action with its arguments, YAML keys, profiles and limits", () => {
    const help = renderHelp();
    for (const spec of ACTIONS.filter((a) => !a.userOnly)) expect(help).toContain(`- ${spec.name}:`);
    expect(help).not.toContain("- shell");
    expect(help).toMatch(/small 2 cpu\/4 GiB/);
    expect(help).toMatch(/allowedHosts/);
    expect(help).toMatch(/network\.hostPorts: \[port\], at most 16; .* as host\.sandbox\.internal:<port>/);
    expect(help).toMatch(/64 KiB/);
    expect(help).toMatch(/128 completed exec handles/);
  });

  test("the user's help includes the terminal action, marked user only", () => {
    expect(renderHelp({ includeUserOnly: true })).toMatch(/- shell \(user only\)/);
  });
});

test("service-start refuses PORT and PUBLIC_URL in env, as declared services do", () => {
  for (const key of ["PORT", "PUBLIC_URL"]) {
    expect(() =>
      validateAction({ action: "service-start", name: "demo", service: "x", command: "true", env: { [key]: "1" } }),
    ).toThrow(expect.objectContaining({ code: "CONTROLLER_BAD_INPUT", message: expect.stringContaining(key) }));
  }
});
