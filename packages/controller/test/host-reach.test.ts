// Every action argument that names a host path, a port or a credential is marked where it is
// declared, and what a model's call reaches is derived from those marks (a new argument without
// one fails here, not in a review).
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { SOUNDS_LIKE_HOST_REACH } from "@pi-sandbox/config";
import { ACTIONS } from "../src/client/index.js";
import { hostPathArgs } from "../src/actions/kit/define.js";
import { renderHostReachTable } from "../src/actions/kit/host-reach-table.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../../..");

test("every argument that sounds like it reaches the host carries a mark", () => {
  const unmarked = ACTIONS.flatMap((spec) =>
    spec.args
      .filter((a) => a.reach === undefined && SOUNDS_LIKE_HOST_REACH.test(`${a.name} ${a.type} ${a.text}`))
      .map((a) => `${spec.name}.${a.name}: ${a.text}`),
  );
  expect(unmarked).toEqual([]);
});

test("the host paths of a model's call are the marked arguments", () => {
  const paths = Object.fromEntries(
    ACTIONS.map((spec) => [spec.name, hostPathArgs(spec).map((a) => a.name)]).filter(([, args]) => args!.length > 0),
  );
  expect(paths).toEqual({
    prepare: ["config"],
    create: ["config"],
    doctor: ["config"],
    upload: ["from"],
    download: ["to"],
    apply: ["to"],
    "workspace-export": ["to"],
    "image-import": ["dir"],
    init: ["config"],
  });
});

/** The rows between the markers of `file`, each split into trimmed cells (separator row dropped). */
async function tableIn(file: string): Promise<string[][]> {
  const text = await readFile(join(ROOT, file), "utf8");
  const start = text.indexOf("<!-- host-reach-table:start -->");
  const end = text.indexOf("<!-- host-reach-table:end -->");
  if (start < 0 || end < start) return [];
  return text
    .slice(start, end)
    .split("\n")
    .filter((line) => line.startsWith("|") && !/^\|[\s|:-]+\|$/.test(line))
    .map((line) =>
      line
        .slice(1, -1)
        .split(" | ")
        .map((cell) => cell.trim()),
    );
}

test.each(["README.md", "ARCHITECTURE.md"])("%s lists every kind of host reach as the marks say", async (file) => {
  const expected = renderHostReachTable(ACTIONS);
  const rows = await tableIn(file);
  const wanted = expected
    .split("\n")
    .filter((line) => !/^\|[\s|:-]+\|$/.test(line))
    .map((line) =>
      line
        .slice(2, -2)
        .split(" | ")
        .map((cell) => cell.trim()),
    );
  if (JSON.stringify(rows) !== JSON.stringify(wanted)) {
    throw new Error(`${file}'s host-reach table differs from the marks; put this between its markers:\n${expected}`);
  }
});
