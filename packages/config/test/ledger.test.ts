// ledger.keepDestroyed in sandbox.yaml: how long a destroyed instance's ledger is kept.
import { LIMITS, parseConfig, renderConfig } from "../src/index.js";
import { onlyIssue } from "./support/helpers.js";

test("is absent unless written (kept forever)", () => {
  expect(parseConfig("version: 1").ledger).toBeUndefined();
});

test.each([
  ["forever", null],
  ["off", 0],
  ["30", 30],
  [String(LIMITS.ledgerKeepDaysMax), LIMITS.ledgerKeepDaysMax],
])("%s keeps it %s days and renders back to the same config", (text, days) => {
  const config = parseConfig(`version: 1\nledger:\n  keepDestroyed: ${text}\n`);
  expect(config.ledger).toEqual({ keepDestroyedDays: days });
  expect(parseConfig(renderConfig(config))).toEqual(config);
});

test.each(["0", "1.5", "-3", "30d", "never", String(LIMITS.ledgerKeepDaysMax + 1)])(
  "%s is refused with the accepted forms",
  (text) => {
    const issue = onlyIssue(`version: 1\nledger:\n  keepDestroyed: ${text}\n`);
    expect(issue.path).toBe("ledger.keepDestroyed");
    expect(issue.line).toBe(3);
    expect(issue.message).toContain("must be forever, off, or a whole number of days");
  },
);

test("an unknown key under ledger is an error", () => {
  expect(onlyIssue("version: 1\nledger:\n  keep: 3\n").path).toBe("ledger.keep");
});
