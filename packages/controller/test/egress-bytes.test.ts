// The guest's egress bytes in the ledger (egress-bytes.ts): one summary per host, port and
// protocol, written when its time is up or when the instance changes state (flush), nothing for
// destinations without exchanges.
import { EgressBytesTally, type EgressBytesSummary } from "../src/daemon/egress-bytes.js";

const hop = (host: string, bytesOut: number, bytesIn: number, port = 443) => ({
  host,
  port,
  protocol: "https" as const,
  method: "GET",
  bytesOut,
  bytesIn,
});

test("exchanges are summed per destination and written once at a flush; an empty flush writes nothing", () => {
  const written: EgressBytesSummary[] = [];
  const tally = new EgressBytesTally((summary) => written.push(summary));
  const now = new Date("2026-12-05T10:00:00.000Z");
  tally.add(hop("api.example.com", 100, 2000), now);
  tally.add(hop("api.example.com", 50, 1), new Date(now.getTime() + 5000));
  tally.add(hop("api.example.com", 0, 7, 8443), now);
  tally.add(hop("cdn.example.net", 0, 3_000_000), now);
  tally.flush();
  tally.flush();
  const from = now.toISOString();
  expect(written).toEqual([
    { host: "api.example.com", port: 443, protocol: "https", exchanges: 2, bytesOut: 150, bytesIn: 2001, from },
    { host: "api.example.com", port: 8443, protocol: "https", exchanges: 1, bytesOut: 0, bytesIn: 7, from },
    { host: "cdn.example.net", port: 443, protocol: "https", exchanges: 1, bytesOut: 0, bytesIn: 3_000_000, from },
  ]);
});

test("a summary is written on its own once its time is up, and the next exchange starts a new one", async () => {
  const written: EgressBytesSummary[] = [];
  const tally = new EgressBytesTally((summary) => written.push(summary), 50);
  tally.add(hop("api.example.com", 1, 2));
  while (written.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
  tally.add(hop("api.example.com", 3, 4));
  while (written.length === 1) await new Promise((resolve) => setTimeout(resolve, 10));
  expect(written.map((s) => [s.exchanges, s.bytesOut, s.bytesIn])).toEqual([
    [1, 1, 2],
    [1, 3, 4],
  ]);
});
