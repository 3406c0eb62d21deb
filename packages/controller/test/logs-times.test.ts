// logs --since and --timestamps (issue #28 section 5): the controller log's lines carry the time
// they were written, a service log's carry none. No VM: the controller log is a file here.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { validateAction } from "../src/client/index.js";
import { actionFromArgv } from "../src/cli/cli.js";
import { receivedStamper } from "../src/cli/logs-follow.js";
import { hostLogTailSince } from "../src/actions/host-log-follow.js";
import { sinceOption } from "../src/actions/logs.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "logs-times-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("--since", () => {
  test("a duration counts back from now and a timestamp is read as given, both sent as an ISO time", () => {
    const now = Date.parse("2026-01-31T12:00:00.000Z");
    expect(sinceOption("10m", now)).toBe("2026-01-31T11:50:00.000Z");
    expect(sinceOption("1h30m", now)).toBe("2026-01-31T10:30:00.000Z");
    expect(sinceOption("2d", now)).toBe("2026-01-29T12:00:00.000Z");
    expect(sinceOption("2026-01-31T08:15:00Z", now)).toBe("2026-01-31T08:15:00.000Z");
    expect(sinceOption("2026-01-30", now)).toBe("2026-01-30T00:00:00.000Z");
    expect(sinceOption(undefined, now)).toBeUndefined();
    expect(() => sinceOption("yesterday", now)).toThrow(/--since takes a duration such as 10m.*; got yesterday/);
  });

  test("the controller log shows only lines written since then, the rotated file included", async () => {
    const file = join(dir, "controller.log");
    await writeFile(
      `${file}.1`,
      "2026-01-31T09:00:00.000Z info [daemon] old\n2026-01-31T10:59:59.999Z info [daemon] just before\n",
    );
    await writeFile(
      file,
      "2026-01-31T11:00:00.000Z info [daemon] rotated in\nno time of its own\n2026-01-31T11:30:00.000Z warn [svc web] later\n",
    );
    const since = await hostLogTailSince(file, "2026-01-31T11:00:00.000Z", 500);
    expect(since.lines).toEqual([
      "2026-01-31T11:00:00.000Z info [daemon] rotated in",
      "no time of its own",
      "2026-01-31T11:30:00.000Z warn [svc web] later",
    ]);
    expect(since.cursor).toMatch(/^\d+:\d+$/);
    expect((await hostLogTailSince(file, "2026-01-31T10:00:00.000Z", 2)).lines).toEqual([
      "no time of its own",
      "2026-01-31T11:30:00.000Z warn [svc web] later",
    ]);
    expect((await hostLogTailSince(join(dir, "absent.log"), "2026-01-31T10:00:00.000Z", 5)).lines).toEqual([]);
  });

  test("a service log is refused with the reason, on the command line and in the action", async () => {
    await expect(actionFromArgv(["logs", "demo", "web", "--since", "10m"])).rejects.toMatchObject({
      code: "CONTROLLER_USAGE",
      message: expect.stringMatching(
        /--since: since works for the controller log only: a service log keeps what the service printed, as printed, with no time/,
      ),
    });
    expect(() =>
      validateAction({ action: "logs", name: "demo", service: "web", since: "2026-01-31T11:00:00Z" }),
    ).toThrow(
      expect.objectContaining({ code: "CONTROLLER_BAD_INPUT", message: expect.stringMatching(/controller log only/) }),
    );
    expect(() => validateAction({ action: "logs", name: "demo", since: "10m" })).toThrow(
      expect.objectContaining({ code: "CONTROLLER_BAD_INPUT" }),
    );
    expect(await actionFromArgv(["logs", "demo", "--since", "2026-01-31T11:00:00Z", "-f"])).toMatchObject({
      action: { action: "logs", name: "demo", since: "2026-01-31T11:00:00.000Z", follow: true },
      run: { kind: "follow-logs" },
    });
  });
});

describe("--timestamps", () => {
  test("a service log needs -f, and then the reads after the tail are stamped with their arrival", async () => {
    await expect(actionFromArgv(["logs", "demo", "web", "--timestamps"])).rejects.toThrow(
      /--timestamps on a service log needs -f: its lines carry no time/,
    );
    expect(await actionFromArgv(["logs", "demo", "web", "-f", "-t"])).toMatchObject({
      run: { kind: "follow-logs", stampReceived: true },
    });
    // The controller log's lines start with their own time: nothing is added.
    expect(await actionFromArgv(["logs", "demo", "-f", "--timestamps"])).toMatchObject({
      run: { kind: "follow-logs" },
    });
    expect(((await actionFromArgv(["logs", "demo", "-f", "--timestamps"])) as { run: object }).run).not.toHaveProperty(
      "stampReceived",
    );
  });

  test("each line that begins in a read gets the time it was received, once, even when split across reads", () => {
    const stamp = receivedStamper();
    const t1 = new Date("2026-01-31T12:00:01.000Z");
    const t2 = new Date("2026-01-31T12:00:02.000Z");
    // The tail: its lines' times are unknown, so nothing is added; it ended mid-line.
    expect(stamp("old 1\nold 2\npart", undefined)).toBe("old 1\nold 2\npart");
    expect(stamp("ial\nnew 1\nnew 2\n", t1)).toBe(
      "ial\n2026-01-31T12:00:01.000Z new 1\n2026-01-31T12:00:01.000Z new 2\n",
    );
    expect(stamp("", t2)).toBe("");
    expect(stamp("next\n", t2)).toBe("2026-01-31T12:00:02.000Z next\n");
  });
});
