// Guest text is hostile: the one escaping function every printer uses, and the rule that keeps
// terminal escape sequences out of preview labels in sandbox.yaml.
import { escapeControlChars, hasControlChars, parseConfig } from "../src/index.js";
import { onlyIssue, rejection, withService } from "./support/helpers.js";

/** Every C0 control, DEL and every C1 control. */
const ALL_CONTROLS = [
  ...Array.from({ length: 0x20 }, (_, i) => String.fromCharCode(i)),
  "\u007f",
  ...Array.from({ length: 0x20 }, (_, i) => String.fromCharCode(0x80 + i)),
].join("");
const RAW_CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

describe("escapeControlChars", () => {
  test("escapes an OSC 52 clipboard write, a screen clear and C1 CSI visibly", () => {
    expect(escapeControlChars("x\u001b]52;c;aGk=\u0007\u001b[2Jz")).toBe("x\\x1b]52;c;aGk=\\x07\\x1b[2Jz");
    expect(escapeControlChars("\u009b31m\u007f")).toBe("\\u009b31m\\u007f");
    expect(escapeControlChars("a\nb\tc\r\nd\re")).toBe("a\\nb\\tc\\r\\nd\\re");
  });

  test("leaves no control character at all, in either mode", () => {
    expect(escapeControlChars(ALL_CONTROLS)).not.toMatch(RAW_CONTROL);
    const multi = escapeControlChars(ALL_CONTROLS, { multiline: true });
    expect(multi.replace(/[\n\t]/g, "")).not.toMatch(RAW_CONTROL);
  });

  test("multi-line text keeps line breaks, tabs and CRLF, but not a lone CR or colour codes", () => {
    expect(escapeControlChars("ok\n\tindented\r\nwin\rover \u001b[31mred\u001b[0m\n", { multiline: true })).toBe(
      "ok\n\tindented\r\nwin\\rover \\x1b[31mred\\x1b[0m\n",
    );
  });

  test("plain text is returned as is, and escaping is idempotent", () => {
    const plain = "Docs — ünïcode \\x1b stays text";
    expect(escapeControlChars(plain)).toBe(plain);
    const once = escapeControlChars(ALL_CONTROLS);
    expect(escapeControlChars(once)).toBe(once);
    const onceMulti = escapeControlChars(ALL_CONTROLS, { multiline: true });
    expect(escapeControlChars(onceMulti, { multiline: true })).toBe(onceMulti);
  });

  test("escaped JSON text is still JSON of the same value", () => {
    const value = { title: `t${ALL_CONTROLS}`, output: "line\n\u009b2J" };
    const escaped = escapeControlChars(JSON.stringify(value, null, 2), { multiline: true });
    expect(escaped.replace(/\n/g, "")).not.toMatch(RAW_CONTROL);
    expect(JSON.parse(escaped)).toEqual(value);
  });

  test("hasControlChars agrees with the escaping", () => {
    expect(hasControlChars("plain")).toBe(false);
    expect(hasControlChars("a\nb")).toBe(true);
    expect(hasControlChars("a\nb\tc\r\n", { multiline: true })).toBe(false);
    expect(hasControlChars("a\rb", { multiline: true })).toBe(true);
    expect(hasControlChars("\u0085", { multiline: true })).toBe(true);
  });
});

describe("control characters in preview labels", () => {
  test("a title carrying an OSC 52 sequence is refused with its path, line and column, escaped", () => {
    const error = rejection(withService('preview: { title: "x\\e]52;c;aGk=\\a\\e[2Jz" }'));
    expect(error.code).toBe("CONFIG_INVALID");
    expect(error.issues).toEqual([
      {
        path: "services.web.preview.title",
        message:
          '`services.web.preview.title` must not contain control characters (such as ESC, BEL or a line break); write plain text; got "x\\u001b]52;c;aGk=\\u0007\\u001b[2Jz"',
        line: 5,
        column: 23,
      },
    ]);
    // The header and each issue are lines of their own; nothing else in the message is a control.
    expect(error.message.split("\n")).toHaveLength(2);
    expect(error.message.replace(/\n/g, "")).not.toMatch(RAW_CONTROL);
  });

  test.each([
    ['previews: [{ url: "/a\\e[2J", title: A }]', "services.web.previews.0.url"],
    ['previews: [{ url: /a, title: "A\\nB" }]', "services.web.previews.0.title"],
    ['previews: [{ folder: "F\\x9b", links: [{ url: /, title: a }] }]', "services.web.previews.0.folder"],
    ['previews: [{ folder: f, links: [{ url: /, title: "a\\x07" }] }]', "services.web.previews.0.links.0.title"],
    ['preview: { description: "d\\e]0;owned\\a" }', "services.web.preview.description"],
    ['preview: { description: "d\\rhidden" }', "services.web.preview.description"],
  ])("%s is refused at %s", (line, path) => {
    const issue = onlyIssue(withService(line));
    expect(issue.path).toBe(path);
    expect(issue.message).toMatch(/must not contain control characters/);
    expect(issue.message).not.toMatch(RAW_CONTROL);
    expect(issue.line).toBe(5);
  });

  test("a C1 control in a value is escaped in the message too (JSON.stringify leaves it raw)", () => {
    const issue = onlyIssue(withService('preview: { title: "a\\x9b2J" }'));
    expect(issue.message).toContain('got "a\\u009b2J"');
  });

  test("a description may span lines and hold tabs; a title may hold any printable text", () => {
    const config = parseConfig(
      withService("preview:\n  title: Docs — ünïcode\n  description: >\n    one\n    two\n\n    \tthree"),
    );
    expect(config.services.web!.preview).toEqual({
      url: "/",
      title: "Docs — ünïcode",
      description: "one two\n\n\tthree\n",
    });
  });
});
