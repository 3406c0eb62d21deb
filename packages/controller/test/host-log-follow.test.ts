// Following the controller log (a host file rotated to .1): complete lines after a cursor.
import { appendFile, mkdtemp, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hostLogSince, hostLogTail } from "../src/actions/host-log-follow.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "host-log-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

test("the tail, then only complete lines written after it, across a rotation", async () => {
  const file = join(dir, "controller.log");
  expect(await hostLogTail(file, 5)).toEqual({ lines: [], cursor: "0:0" });
  await appendFile(file, "a\nb\nc\n");
  const tail = await hostLogTail(file, 2);
  expect(tail.lines).toEqual(["b", "c"]);
  await appendFile(file, "d\npartial");
  const next = await hostLogSince(file, tail.cursor);
  expect(next).toMatchObject({ lines: ["d"], more: false });
  await appendFile(file, " line\n");
  await rename(file, `${file}.1`);
  await appendFile(file, "e\n");
  const rotated = await hostLogSince(file, next.cursor);
  expect(rotated.lines).toEqual(["partial line", "e"]);
  expect((await hostLogSince(file, rotated.cursor)).lines).toEqual([]);
});

test("the unfinished end of a rotated log is passed on, not waited for", async () => {
  const file = join(dir, "controller.log");
  await appendFile(file, "a\n");
  const tail = await hostLogTail(file, 5);
  await appendFile(file, "cut off");
  await rename(file, `${file}.1`);
  await appendFile(file, "b\n");
  const read = await hostLogSince(file, tail.cursor);
  expect(read).toMatchObject({ lines: ["cut off", "b"], more: false });
});
