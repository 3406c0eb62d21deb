// Preview traffic in the ledger, one summary per minute with traffic: the requests, WebSocket opens
// and bytes the gateway counted in it, nothing for a quiet minute, and a restarted gateway (its
// counts from zero) not read as less.
import type { PreviewActivity } from "@pi-sandbox/ingress";
import { PREVIEW_TALLY_MS, PreviewTally } from "../src/daemon/preview-tally.js";

const at = (requests: number, upgrades: number, bytesIn: number, bytesOut: number): PreviewActivity => ({
  open: 0,
  seen: 2 * (requests + upgrades),
  requests,
  upgrades,
  bytesIn,
  bytesOut,
});

test("one summary per minute with traffic, none for a quiet one, and a new gateway counts from zero", () => {
  const t0 = Date.parse("2026-12-05T10:00:00Z");
  const tally = new PreviewTally(t0);
  expect(tally.look(t0 + 30_000, at(3, 0, 300, 3000))).toBeUndefined();
  expect(tally.look(t0 + PREVIEW_TALLY_MS, at(5, 1, 500, 5000))).toEqual({
    from: "2026-12-05T10:00:00.000Z",
    requests: 5,
    upgrades: 1,
    bytesIn: 500,
    bytesOut: 5000,
  });
  // An open WebSocket's bytes alone, no new request or open.
  expect(tally.look(t0 + 2 * PREVIEW_TALLY_MS, at(5, 1, 600, 5200))).toEqual({
    from: "2026-12-05T10:01:00.000Z",
    requests: 0,
    upgrades: 0,
    bytesIn: 100,
    bytesOut: 200,
  });
  expect(tally.look(t0 + 3 * PREVIEW_TALLY_MS, at(7, 1, 800, 5900))).toEqual({
    from: "2026-12-05T10:02:00.000Z",
    requests: 2,
    upgrades: 0,
    bytesIn: 200,
    bytesOut: 700,
  });
  // A quiet minute, and one without a gateway.
  expect(tally.look(t0 + 4 * PREVIEW_TALLY_MS, at(7, 1, 800, 5900))).toBeUndefined();
  expect(tally.look(t0 + 5 * PREVIEW_TALLY_MS, undefined)).toBeUndefined();
  // The instance restarted: its new gateway has counted 2 requests so far.
  expect(tally.look(t0 + 6 * PREVIEW_TALLY_MS, at(2, 0, 90, 900))).toEqual({
    from: "2026-12-05T10:05:00.000Z",
    requests: 2,
    upgrades: 0,
    bytesIn: 90,
    bytesOut: 900,
  });
});
