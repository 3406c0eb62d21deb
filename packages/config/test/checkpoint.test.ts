// checkpoint.every in sandbox.yaml: how much guest activity may pass between automatic checkpoints
// of a running instance's disk, or off.
import { CONFIG_DEFAULTS, parseConfig, renderConfig, sandboxJsonSchema } from "../src/index.js";
import { onlyIssue } from "./support/helpers.js";

describe("checkpoint.every", () => {
  test("is every 5 minutes of activity unless written, and the default is not written back", () => {
    const config = parseConfig("version: 1");
    expect(config.checkpoint).toEqual({ everyMs: 5 * 60_000 });
    expect(CONFIG_DEFAULTS.checkpointEveryMs).toBe(5 * 60_000);
    expect(renderConfig(config)).not.toContain("checkpoint");
    expect(renderConfig(parseConfig("version: 1\ncheckpoint: {every: 5m}\n"))).not.toContain("checkpoint");
  });

  test.each([
    ["30s", 30_000],
    ["90s", 90_000],
    ["1h30m", 5_400_000],
    ["24h", 86_400_000],
  ])("%s checkpoints after %d ms of activity and renders back to the same config", (text, ms) => {
    const config = parseConfig(`version: 1\ncheckpoint:\n  every: ${text}\n`);
    expect(config.checkpoint).toEqual({ everyMs: ms });
    expect(renderConfig(config)).toContain(`checkpoint:\n  every: ${text === "90s" ? "1m30s" : text}\n`);
    expect(parseConfig(renderConfig(config))).toEqual(config);
  });

  test("off turns automatic checkpoints off, and renders as off", () => {
    const config = parseConfig("version: 1\ncheckpoint:\n  every: off\n");
    expect(config.checkpoint).toEqual({ everyMs: null });
    expect(renderConfig(config)).toContain("checkpoint:\n  every: off\n");
    expect(parseConfig(renderConfig(config))).toEqual(config);
  });

  test("a record written before the key existed renders without it", () => {
    const { checkpoint: _gone, ...old } = parseConfig("version: 1");
    expect(renderConfig(old as ReturnType<typeof parseConfig>)).not.toContain("checkpoint");
  });

  test.each(["10s", "25h", "5", "5 minutes", "never", "false"])(
    "%s is refused with the accepted form and range",
    (text) => {
      const issue = onlyIssue(`version: 1\ncheckpoint:\n  every: "${text}"\n`);
      expect(issue.path).toBe("checkpoint.every");
      expect(issue.line).toBe(3);
      expect(issue.message).toContain("between 30s and 24h, or off");
    },
  );

  test("an unknown key under checkpoint is an error", () => {
    expect(onlyIssue("version: 1\ncheckpoint:\n  every: 5m\n  kept: 3\n").path).toBe("checkpoint.kept");
  });


  test("editors learn the key from the JSON Schema: off or a duration", () => {
    const properties = sandboxJsonSchema().properties as Record<string, { properties?: Record<string, unknown> }>;
    expect(JSON.stringify(properties.checkpoint?.properties?.every)).toContain('"const":"off"');
  });
});

describe("checkpoint.keep and checkpoint.keepGiB", () => {
  test("are absent unless written (the controller applies the defaults), and render back as written", () => {
    expect(parseConfig("version: 1").checkpoint).toEqual({ everyMs: 5 * 60_000 });
    expect(CONFIG_DEFAULTS.checkpointKeep).toBe(30);
    expect(CONFIG_DEFAULTS.checkpointKeepGiB).toBe(20);
    const config = parseConfig("version: 1\ncheckpoint:\n  keep: 5\n  keepGiB: 3\n");
    expect(config.checkpoint).toEqual({ everyMs: 5 * 60_000, keep: 5, keepGiB: 3 });
    expect(renderConfig(config)).toContain("checkpoint:\n  keep: 5\n  keepGiB: 3\n");
    expect(parseConfig(renderConfig(config))).toEqual(config);
  });

  test.each([
    ["keep", "0"],
    ["keep", "501"],
    ["keep", "2.5"],
    ["keepGiB", "0"],
    ["keepGiB", '"5"'],
  ])("%s: %s is refused with the accepted range", (key, value) => {
    const issue = onlyIssue(`version: 1\ncheckpoint:\n  ${key}: ${value}\n`);
    expect(issue.path).toBe(`checkpoint.${key}`);
    expect(issue.message).toMatch(/must be a whole number of (checkpoints|GiB) between 1 and \d+/);
  });
});
