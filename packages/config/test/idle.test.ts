// idle.suspendAfter in sandbox.yaml, and the durations it (and `--idle-suspend`) are written in.
import { LIMITS, formatDuration, parseConfig, parseDuration, renderConfig } from "../src/index.js";
import { onlyIssue } from "./support/helpers.js";

describe("idle.suspendAfter", () => {
  test("is off unless written", () => {
    expect(parseConfig("version: 1").idle).toBeUndefined();
  });

  test.each([
    ["20s", 20_000],
    ["15m", 900_000],
    ["1h30m", 5_400_000],
    ["90s", 90_000],
  ])("%s suspends after %d ms and renders back to the same config", (text, ms) => {
    const config = parseConfig(`version: 1\nidle:\n  suspendAfter: ${text}\n`);
    expect(config.idle).toEqual({ suspendAfterMs: ms });
    expect(parseConfig(renderConfig(config))).toEqual(config);
  });

  test.each(["5s", "8d", "15", "15 minutes", "-1m", "m"])("%s is refused with the accepted form and range", (text) => {
    const issue = onlyIssue(`version: 1\nidle:\n  suspendAfter: "${text}"\n`);
    expect(issue.path).toBe("idle.suspendAfter");
    expect(issue.line).toBe(3);
    expect(issue.message).toContain("between 10s and 168h");
  });

  test("an unknown key under idle is an error, and so is a missing suspendAfter", () => {
    expect(onlyIssue("version: 1\nidle:\n  suspendAfter: 1m\n  cpu: 5\n").path).toBe("idle.cpu");
    expect(onlyIssue("version: 1\nidle: {}\n").message).toContain("suspendAfter");
  });
});

describe("durations", () => {
  test("read hours, minutes and seconds in that order, and write the shortest form back", () => {
    expect(parseDuration("2h")).toBe(7_200_000);
    expect(parseDuration(" 45s ")).toBe(45_000);
    expect(parseDuration("1m1h")).toBeUndefined();
    expect(parseDuration("")).toBeUndefined();
    expect(formatDuration(3_723_000)).toBe("1h2m3s");
    expect(formatDuration(LIMITS.idleSuspendMinMs)).toBe("10s");
  });
});
