// How raw tool arguments are normalized before validation, and how inputs are read for labels.

import { peekAction, prepareSandboxArguments } from "../src/index.js";

test("bare strings, action objects and object inputs become { input: string }", () => {
  expect(prepareSandboxArguments('{"action":"list"}')).toEqual({ input: '{"action":"list"}' });
  expect(prepareSandboxArguments("help")).toEqual({ input: "help" });
  expect(prepareSandboxArguments({ action: "inspect", name: "a" })).toEqual({
    input: '{"action":"inspect","name":"a"}',
  });
  expect(prepareSandboxArguments({ input: { action: "list" } })).toEqual({ input: '{"action":"list"}' });
  expect(prepareSandboxArguments({})).toEqual({ input: "{}" });
  expect(prepareSandboxArguments(undefined)).toEqual({ input: "{}" });
});

test("well-formed and unknown shapes pass through for the schema to judge", () => {
  const ok = { input: '{"action":"list"}' };
  expect(prepareSandboxArguments(ok)).toBe(ok);
  expect(prepareSandboxArguments({ input: 5 })).toEqual({ input: 5 });
  expect(prepareSandboxArguments({ foo: 1 })).toEqual({ foo: 1 });
  expect(prepareSandboxArguments(42)).toBe(42);
});

test("peekAction reads action, name, kind and pid without validating", () => {
  expect(peekAction("")).toEqual({ action: "help" });
  expect(peekAction(" help ")).toEqual({ action: "help" });
  expect(peekAction("{}")).toEqual({ action: "help" });
  expect(peekAction('{"action":"exec-status","name":"d","pid":"4"}')).toEqual({
    action: "exec-status",
    name: "d",
    pid: "4",
  });
  expect(peekAction('{"action":"destroy","name":"t","kind":"templates"}')).toMatchObject({ kind: "templates" });
  expect(peekAction("{broken")).toEqual({ action: "?" });
  expect(peekAction("[1]")).toEqual({ action: "?" });
  expect(peekAction('{"name":"x"}')).toEqual({ action: "?", name: "x" });
});
