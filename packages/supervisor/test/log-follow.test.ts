// followLogs through the real agent (a host process): the tail and a cursor, then only what came
// after it, across a restart of the service; followSetup likewise for a setup run.
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { startLocal, waitFor, type LocalSupervisor } from "./support/local.js";

let sup: LocalSupervisor;
beforeAll(async () => {
  sup = await startLocal();
});
afterAll(async () => {
  await sup?.close();
});

test("a followed log gives only new lines, across a restart of the service", async () => {
  const feed = join(sup.workspace, "feed.txt");
  await writeFile(feed, "");
  await sup.client.startService({ name: "feed", command: `exec tail -n 0 -F ${feed}`, health: { kind: "process" } });
  const first = await sup.client.followLogs("feed", { lines: 5 });
  expect(first).toMatchObject({ service: "feed", more: false, cursor: expect.stringMatching(/^\d+:\d+$/) });
  let cursor = first.cursor;
  let seen = "";
  const count = (line: string) => seen.split(line).length - 1;
  // tail -F may open the file a moment after the service counts as started: write until seen.
  const follow = async (line: string) => {
    await waitFor(async () => {
      if (!seen.includes(line)) await writeFile(feed, line, { flag: "a" });
      const next = await sup.client.followLogs("feed", { cursor });
      cursor = next.cursor;
      seen += next.text;
      return seen.includes(line);
    });
  };
  await follow("one\n");
  expect(seen).toMatch(/^(one\n)+$/);
  const ones = count("one\n");
  await sup.client.restartServices(["feed"]);
  await follow("two\n");
  // Nothing came twice: what was read before the restart is not read again.
  expect(count("one\n")).toBe(ones);
  expect(seen).toMatch(/stopped \(signal SIGTERM\)\n.*started pid/);
  await expect(sup.client.followLogs("feed", { cursor: "../x" })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
  await expect(sup.client.followLogs("ghost")).rejects.toMatchObject({ code: "SERVICE_NOT_FOUND" });
});

test("followSetup reads a running setup from its start, step lines and output, then its end", async () => {
  expect(await sup.client.followSetup()).toMatchObject({ running: false, text: "" });
  const gate = join(sup.workspace, "gate");
  const setup = sup.client.runSetup({
    commands: ["echo one", `while [ ! -e ${gate} ]; do sleep 0.05; done; echo two`],
  });
  let cursor: string | undefined;
  let seen = "";
  await waitFor(async () => {
    const next = await sup.client.followSetup(cursor === undefined ? {} : { cursor });
    cursor = next.cursor;
    seen += next.text;
    return next.running && seen.includes("\none\n");
  });
  expect(seen).toMatch(/^\[pi-sandbox [^\]]+\] setup step 1\/2: echo one\none\n/);
  await writeFile(gate, "");
  expect((await setup).ok).toBe(true);
  const end = await sup.client.followSetup({ cursor: cursor! });
  expect(end.running).toBe(false);
  expect(`${seen}${end.text}`).toMatch(/setup step 2\/2: [^\n]*echo two\ntwo\n/);
  await expect(sup.client.followSetup({ cursor: "x" })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
});
