// `npm run bench`: runs every package's benchmark one after another (never in parallel: they
// share two cores) and prints one summary table of ratios, then each package's own report.
// Benchmarks append JSON rows {package, name, ours, baseline, ratio, unit, target, note} to
// $PI_SANDBOX_BENCH_OUT; anything else they print is kept as their detailed report.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const packages = ["vm", "supervisor", "ingress", "controller"];
const dir = mkdtempSync(join(tmpdir(), "bench-"));
const out = join(dir, "rows.jsonl");
writeFileSync(out, "");

const build = spawnSync("npx", ["nx", "run-many", "-t", "build", "--outputStyle=static"], { stdio: ["ignore", 2, 2] });
if (build.status !== 0) throw new Error("the build failed; benchmarks run the built packages");
const image = spawnSync("npm", ["run", "-s", "test-image"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
if (image.status !== 0) throw new Error("could not get the guest test image (npm run -s test-image)");
const env = {
  ...process.env,
  PI_SANDBOX_BENCH_OUT: out,
  PI_SANDBOX_TEST_IMAGE: image.stdout.trim().split("\n").at(-1),
};

const reports = [];
let failed = false;
for (const name of packages) {
  process.stderr.write(`bench: ${name}…\n`);
  const run = spawnSync("npm", ["run", "-s", "bench", "-w", `packages/${name}`], {
    encoding: "utf8",
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  reports.push(`### ${name}${run.status === 0 ? "" : ` (FAILED, exit ${run.status})`}\n\n${run.stdout.trim()}\n`);
  if (run.status !== 0) failed = true;
}

const rows = readFileSync(out, "utf8")
  .split("\n")
  .filter(Boolean)
  .map((line) => JSON.parse(line));
const accel =
  rows.find((r) => r.accelerator)?.accelerator ??
  (spawnSync("test", ["-w", "/dev/kvm"]).status === 0 ? "kvm (if usable)" : "tcg");
const fmt = (value, unit) =>
  value === undefined || value === null
    ? ""
    : `${Number(value).toFixed(Math.abs(value) < 10 ? 2 : 1)}${unit ? ` ${unit}` : ""}`;
const lines = [
  `Accelerator: ${accel}. Host: ${process.arch}, node ${process.version}. Date: ${new Date().toISOString()}.`,
  "",
  "| package | measurement | ours | baseline | ratio | target |",
  "|---|---|---|---|---|---|",
  ...rows.map(
    (r) =>
      `| ${r.package} | ${r.name}${r.note ? ` (${r.note})` : ""} | ${fmt(r.ours, r.unit)} | ${fmt(r.baseline, r.unit)} | ${r.ratio === undefined || r.ratio === null ? "" : Number(r.ratio).toFixed(2)} | ${r.target ?? ""} |`,
  ),
  "",
  ...reports,
];
console.log(lines.join("\n"));
rmSync(dir, { recursive: true, force: true });
process.exitCode = failed ? 1 : 0;
