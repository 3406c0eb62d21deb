// Guest text never reaches a terminal raw: the CLI's output, the action schemas' preview labels
// and the controller log. State files stand in for what a hostile guest left behind (agent error
// messages, preview titles); the real-VM path is in cli-exec.vm.test.ts.
import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseConfig } from "@pi-sandbox/config";
import { ControllerError, StateLayout, validateAction } from "../src/client/index.js";
import { formatView } from "../src/actions/kit/text.js";
import { createFileLogger } from "../src/log.js";
import { writeRecord, writeStatus } from "../src/state/records.js";
import { runningView } from "./support/views.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
/** What a prompt-injected guest writes: OSC 52 (sets the clipboard), BEL, a screen clear, C1 CSI. */
const HOSTILE = "x\u001b]52;c;aGk=\u0007\u001b[2Jz\u009b2J";
/** Any C0 control but line feed and tab, DEL, any C1 control. */
const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "esc-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function cli(home: string, ...args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], {
    encoding: "utf8",
    env: { ...process.env, PI_SANDBOX_HOME: home },
  });
}

function badInput(input: Record<string, unknown>): ControllerError {
  try {
    validateAction(input);
  } catch (error) {
    expect(error).toBeInstanceOf(ControllerError);
    return error as ControllerError;
  }
  throw new Error("expected CONTROLLER_BAD_INPUT");
}

describe("the action schemas refuse control characters in preview labels", () => {
  const start = { action: "service-start", name: "demo", service: "web", command: "x" };
  test.each([
    ["a preview title", { action: "preview", name: "demo", port: 8000, title: HOSTILE }, "title"],
    [
      "a preview description",
      { action: "preview", name: "demo", port: 8000, description: "a\u001b[2J" },
      "description",
    ],
    ["a service-start title", { ...start, preview: true, title: "a\nb" }, "title"],
    ["a link URL", { ...start, previews: [{ url: "/\u0007", title: "t" }] }, "previews"],
    ["a folder name", { ...start, previews: [{ folder: "f\u009b", links: [{ url: "/", title: "t" }] }] }, "previews"],
  ])("%s", (_label, input, field) => {
    const error = badInput(input);
    expect(error.code).toBe("CONTROLLER_BAD_INPUT");
    expect(error.message).toContain(field);
    expect(error.message).not.toMatch(RAW_CONTROL);
  });

  test("a description may span lines; plain titles pass", () => {
    const { args } = validateAction({
      action: "service-start",
      name: "demo",
      service: "web",
      command: "x",
      preview: true,
      title: "Docs — ünïcode",
      description: "one\n\ttwo",
      previews: [{ folder: "More", links: [{ url: "https://example.com/a?b=1", title: "A", description: "x\ny" }] }],
    });
    expect(args.title).toBe("Docs — ünïcode");
  });
});

test("one controller log entry is exactly one line, whatever its message or prefix holds", async () => {
  const file = join(dir, "controller.log");
  const log = createFileLogger(file, "[controller demo]");
  log.info(`agent said ${HOSTILE}\n2026-01-01T00:00:00.000Z info [controller demo] forged entry`);
  log.child("[svc \u001b[31mweb]").warn("line one\r\nline two\ttabbed");
  log.info("plain");
  const lines = (await readFile(file, "utf8")).split("\n");
  expect(lines.pop()).toBe("");
  expect(lines).toHaveLength(3);
  for (const line of lines) expect(line).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
  expect(lines[0]).toContain("agent said x\\x1b]52;c;aGk=\\x07\\x1b[2Jz\\u009b2J\\n2026-01-01T00:00:00.000Z info");
  expect(lines[1]).toMatch(/ warn \[controller demo\] \[svc \\x1b\[31mweb\] line one\\r\\nline two\\ttabbed$/);
});

test("formatView escapes every guest field and indents the lines of a multi-line error", () => {
  const view = runningView({
    previews: [{ service: "web", url: `http://127.0.0.1:4000/${HOSTILE}`, title: HOSTILE, folder: `f\n${HOSTILE}` }],
    errors: [{ code: "SERVICE_FAILED", message: `web died: ${HOSTILE}\npreview:     forged`, at: "now" }],
  });
  const text = formatView(view);
  expect(text).not.toMatch(RAW_CONTROL);
  expect(text).toContain("  x\\x1b]52;c;aGk=\\x07\\x1b[2Jz\\u009b2J [f\\nx\\x1b]52");
  expect(text.split("\n").filter((line) => line.startsWith("preview:"))).toHaveLength(1);
  expect(text).toContain("\n             preview:     forged\n");
});

describe("the CLI prints guest text escaped", () => {
  let home: string;
  beforeAll(async () => {
    home = join(dir, "state");
    const layout = new StateLayout(home);
    await layout.ensurePrivate();
    await mkdir(layout.entryDir("instances", "demo"), { recursive: true });
    const config = parseConfig("version: 1\nprofile: tiny\n");
    await writeRecord(layout, { kind: "instances", name: "demo", createdAt: "2026-01-01T00:00:00.000Z", config });
    await writeStatus(layout, "instances", "demo", {
      state: "stopped",
      updatedAt: "2026-01-01T00:00:00.000Z",
      accelerator: "tcg",
      acceleratorReason: `no KVM ${HOSTILE}`,
      errors: [
        { code: "SERVICE_FAILED", message: `service web: ${HOSTILE}`, hint: `see ${HOSTILE}`, at: "2026-01-01" },
      ],
    });
    // A log written before entries were escaped, or edited by hand.
    await writeFile(
      layout.logFile("instances", "demo"),
      `2026-01-01T00:00:00.000Z info [controller demo] ${HOSTILE}\n`,
    );
  });

  test.each([
    ["inspect", "demo"],
    ["list"],
    ["logs", "demo"],
    ["inspect", "demo", "--json"],
    ["call", '{"action":"inspect","name":"demo"}'],
  ])("pi-sandbox %s …", (...args: string[]) => {
    const out = cli(home, ...args);
    expect(out.status).toBe(0);
    expect(out.stdout).not.toMatch(RAW_CONTROL);
    expect(out.stderr).not.toMatch(RAW_CONTROL);
    if (args[0] === "inspect" && args.length === 2) {
      expect(out.stdout).toContain("error:       SERVICE_FAILED: service web: x\\x1b]52;c;aGk=\\x07\\x1b[2Jz\\u009b2J");
    }
    if (args.includes("--json") || args[0] === "call") {
      // Still JSON, of the same value: the escapes are JSON escapes.
      expect(JSON.parse(out.stdout).errors[0].message).toBe(`service web: ${HOSTILE}`);
    }
  });

  test("errors and usage errors are escaped too", () => {
    const badJson = cli(home, "call", `{"action":"list",${HOSTILE}`);
    expect(badJson.status).toBe(1);
    expect(badJson.stderr).not.toMatch(RAW_CONTROL);
    expect(JSON.parse(badJson.stderr).error.code).toBe("CONTROLLER_BAD_INPUT");
    const unknown = cli(home, `frob${HOSTILE}`);
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain("unknown command frobx\\x1b]52;c;aGk=\\x07");
    expect(unknown.stderr).not.toMatch(RAW_CONTROL);
    const human = cli(home, "preview", "demo", "8000", "--title", HOSTILE);
    expect(human.status).toBe(1);
    expect(human.stderr).toMatch(/^error CONTROLLER_BAD_INPUT: preview: title: must not contain control characters/);
    expect(human.stderr).not.toMatch(RAW_CONTROL);
  });
});
