// Preview traffic in the ledger, one summary per minute with traffic: what the gateway's count
// says, nothing for a quiet minute, and a restarted gateway (its count from zero) not read as less.
import { PREVIEW_TALLY_MS, PreviewTally } from "../src/daemon/preview-tally.js";

test("one summary per minute with traffic, none for a quiet one, and a new gateway counts from zero", () => {
  const t0 = Date.parse("2026-12-05T10:00:00Z");
  const tally = new PreviewTally(t0);
  expect(tally.look(t0 + 30_000, { open: 1, seen: 3 })).toBeUndefined();
  expect(tally.look(t0 + PREVIEW_TALLY_MS, { open: 0, seen: 5 })).toEqual({
    from: "2026-12-05T10:00:00.000Z",
    requests: 5,
  });
  expect(tally.look(t0 + 2 * PREVIEW_TALLY_MS, { open: 0, seen: 5 })).toBeUndefined();
  expect(tally.look(t0 + 3 * PREVIEW_TALLY_MS, undefined)).toBeUndefined();
  // The instance restarted: its new gateway has seen 2 so far.
  expect(tally.look(t0 + 4 * PREVIEW_TALLY_MS, { open: 0, seen: 2 })).toEqual({
    from: "2026-12-05T10:03:00.000Z",
    requests: 2,
  });
});
