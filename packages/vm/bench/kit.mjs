// What the vm package's benchmarks share: a median, and the row each gives `npm run bench`'s
// summary table (scripts/bench.mjs reads them from PI_SANDBOX_BENCH_OUT, one JSON line each).
import fs from "node:fs";

/** The median of `values` (the upper one of an even count). */
export const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** Appends `row` ({name, ours, baseline, ratio, unit, target?}) for the summary, when one is kept. */
export function summaryRow(row) {
  if (process.env.PI_SANDBOX_BENCH_OUT)
    fs.appendFileSync(process.env.PI_SANDBOX_BENCH_OUT, `${JSON.stringify({ package: "vm", ...row })}\n`);
}
