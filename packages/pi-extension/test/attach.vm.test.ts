// A real Pi process (RPC mode, the fake model) attached to one real instance: the footer lists
// it with its preview URL, /sandbox offers a pick list, /sandbox attach routes Pi's own tools
// into the guest (bash, write, edit, read, grep, find, ls, Pi's truncation, abort killing the
// guest command), /sandbox detach returns them to the host, and an instance that stops detaches
// Pi with a message while a new attach to it is refused with the start hint. Attached, a guest
// request to a host off allowedHosts waits for the user's answer in a select.

import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { rm, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { callAction } from "@pi-sandbox/controller/client";
import { SEED_YAML, testImage } from "@pi-sandbox/controller/testing";
import { startFakeOpenAI, type FakeOpenAI } from "./support/fake-openai.js";
import { makePiHome, PACKAGE_DIR, PiRpc, resultText, type Json, type PiHome } from "./support/pi-harness.js";

let fake: FakeOpenAI;
let home: PiHome;
let rpc: PiRpc;
let guestHost = "";

const call = (action: Record<string, unknown>) =>
  callAction(action, { env: home.env, cwd: home.workDir }) as Promise<Json>;

const ui =
  (method: string, match: (e: Json) => boolean = () => true) =>
  (e: Json) =>
    e.type === "extension_ui_request" && e.method === method && match(e);

/** Sends a prompt whose tool calls the fake model scripts, and returns their ends once Pi settles. */
async function run(prompt: string, ...calls: { tool: string; args: Record<string, unknown> }[]): Promise<Json[]> {
  const before = rpc.events.length;
  fake.script(...calls);
  rpc.send({ type: "prompt", message: prompt });
  await rpc.waitFor((e) => e.type === "agent_settled" && rpc.events.indexOf(e) >= before, 300_000);
  return rpc.events.slice(before).filter((e) => e.type === "tool_execution_end");
}

/** The next notify after `from` events. */
function notifyAfter(from: number, timeoutMs = 120_000): Promise<Json> {
  return rpc.waitFor((e) => rpc.events.indexOf(e) >= from && ui("notify")(e), timeoutMs);
}

beforeAll(async () => {
  fake = await startFakeOpenAI();
  home = await makePiHome(fake, "pat-");
  await writeFile(join(home.workDir, "sandbox.yaml"), `version: 1\nimage: ${testImage()}\n${SEED_YAML}`);
  expect((await call({ action: "create", name: "dev", config: "sandbox.yaml" })).state).toBe("running");
  guestHost = ((await call({ action: "exec", name: "dev", cmd: "uname -n" })).output as string).trim();
  rpc = PiRpc.start(home, ["-e", PACKAGE_DIR, "--tools", "read,bash,edit,write,grep,find,ls"]);
});

afterAll(async () => {
  if (rpc) await rpc.close();
  await call({ action: "destroy", name: "dev", confirm: "dev" }).catch(() => undefined);
  await fake?.close();
  if (home) await rm(home.dir, { recursive: true, force: true });
});

test("the footer lists the running instance with its preview, and /sandbox offers it in a pick list", async () => {
  const footer = await rpc.waitFor(ui("setStatus", (e) => e.statusKey === "pi-sandbox.instances" && !!e.statusText));
  expect(footer.statusText).toMatch(/^sandbox: dev http:\/\/127(?:\.\d{1,3}){3}:\d+\/$/);

  // Picking opens a terminal (the ssh path has its own test in pi.vm); here the user cancels.
  const from = rpc.events.length;
  const requests = fake.requests.length;
  rpc.send({ id: "pick", type: "prompt", message: "/sandbox" });
  const pick = await rpc.waitFor((e) => rpc.events.indexOf(e) >= from && ui("select")(e));
  expect(pick.title).toBe("Open a terminal into which instance?");
  expect(pick.options).toEqual([expect.stringMatching(/^dev · running · http:\/\/127(?:\.\d{1,3}){3}:\d+\/$/)]);
  rpc.send({ type: "extension_ui_response", id: pick.id, cancelled: true });
  await rpc.waitFor((e) => e.id === "pick" && e.type === "response");
  expect(rpc.events.slice(from).filter(ui("notify"))).toEqual([]);
  expect(fake.requests.length).toBe(requests);
});

test("attached, Pi's tools work in the guest; nothing lands on the host", async () => {
  const from = rpc.events.length;
  rpc.send({ type: "prompt", message: "/sandbox attach" });
  const pick = await rpc.waitFor((e) => rpc.events.indexOf(e) >= from && ui("select")(e));
  rpc.send({ type: "extension_ui_response", id: pick.id, value: pick.options[0] });
  const attached = await notifyAfter(from);
  expect(attached.message).toMatch(
    /^Attached to dev: read, bash, edit, write, grep, find, ls run in the instance \(cwd \/workspace\)/,
  );
  await rpc.waitFor(
    (e) =>
      rpc.events.indexOf(e) >= from &&
      ui("setStatus", (st) => st.statusKey === "pi-sandbox.attach" && st.statusText === "attached: dev")(e),
  );

  // The user's own !command runs there too.
  rpc.send({ id: "ub", type: "bash", command: "uname -n" });
  const userBash = await rpc.waitFor((e) => e.id === "ub" && e.type === "response");
  expect(userBash.data).toMatchObject({ output: `${guestHost}\n`, exitCode: 0 });

  const ends = await run(
    "work in the sandbox",
    { tool: "bash", args: { command: "uname -n; pwd" } },
    { tool: "write", args: { path: "notes/todo.txt", content: "one fish\ntwo fish\nred fish\n" } },
    { tool: "edit", args: { path: "notes/todo.txt", edits: [{ oldText: "two", newText: "2" }] } },
    { tool: "read", args: { path: "notes/todo.txt" } },
    { tool: "grep", args: { pattern: "fi.h$", path: "notes" } },
    { tool: "find", args: { pattern: "*.txt" } },
    { tool: "ls", args: { path: "notes" } },
  );
  const byTool = Object.fromEntries(ends.map((e) => [e.toolName, e]));
  for (const end of ends)
    expect({ tool: end.toolName, isError: end.isError }).toEqual({ tool: end.toolName, isError: false });
  expect(resultText(byTool.bash!)).toBe(`${guestHost}\n/workspace\n`);
  expect(guestHost).not.toBe(hostname());
  expect(byTool.bash!.result.details.sandbox).toBe("dev");
  expect(resultText(byTool.read!)).toBe("one fish\n2 fish\nred fish\n");
  expect(resultText(byTool.grep!)).toBe("todo.txt:1: one fish\ntodo.txt:2: 2 fish\ntodo.txt:3: red fish");
  expect(resultText(byTool.find!)).toBe("notes/todo.txt");
  expect(resultText(byTool.ls!)).toBe("todo.txt");
  // The file is in the guest workspace, not in Pi's host directory.
  const inGuest = await call({ action: "read", name: "dev", path: "/workspace/notes/todo.txt" });
  expect(inGuest.content).toBe("one fish\n2 fish\nred fish\n");
  expect(existsSync(join(home.workDir, "notes"))).toBe(false);
  // The model was told where its tools run: a session message, and the prompt's cwd and section.
  const sent = JSON.stringify(fake.requests.at(-1)!.messages);
  expect(sent).toContain("attached Pi to the sandbox instance dev");
  expect(sent).toContain("Pi is attached to the sandbox instance dev");
  expect(sent).toMatch(/<cwd>\\n\/workspace\\n<\/cwd>/);

  // Past the action limits: a 1.1 MB guest file is edited (read whole in chunks, written back in
  // parts, since the write action takes 1 MiB).
  const row = (i: number) => `row ${String(i).padStart(5, "0")} ${"x".repeat(30)}\n`;
  await call({
    action: "exec",
    name: "dev",
    cmd: `mkdir -p big && awk 'BEGIN{for(i=1;i<=27000;i++) printf "row %05d %s\\n", i, "${"x".repeat(30)}"}' > big/data.txt`,
  });
  const [edited] = await run("big file", {
    tool: "edit",
    args: { path: "big/data.txt", edits: [{ oldText: "row 26999 x", newText: "row 26999 y" }] },
  });
  expect(edited!.isError).toBe(false);
  expect(edited!.result.details.diff).toContain("26999 y");
  const expected = Array.from({ length: 27_000 }, (_, i) => row(i + 1))
    .join("")
    .replace("row 26999 x", "row 26999 y");
  const sum = await call({ action: "exec", name: "dev", cmd: "sha256sum big/data.txt; ls -A big" });
  expect(sum.output).toBe(`${createHash("sha256").update(expected).digest("hex")}  big/data.txt\ndata.txt\n`);
});

test("bash in the guest: Pi's truncation of long output, and abort ends the guest command", async () => {
  const [long] = await run("count", { tool: "bash", args: { command: "seq 1 100000" } });
  const text = resultText(long!);
  expect(text).toMatch(/\n99999\n100000\n\s*\[Showing lines \d+-\d+ of \d+\. Full output: /);
  expect(text.split("\n").length).toBeLessThan(2100);

  const from = rpc.events.length;
  fake.script({ tool: "bash", args: { command: "touch /tmp/began; sleep 97; touch /tmp/finished" } });
  rpc.send({ type: "prompt", message: "wait a while" });
  await rpc.waitFor((e) => rpc.events.indexOf(e) >= from && e.type === "tool_execution_start");
  for (let i = 0; ; i++) {
    if ((await call({ action: "exec", name: "dev", cmd: "test -e /tmp/began" })).exitCode === 0) break;
    if (i > 100) throw new Error("the guest command never started");
    await new Promise((r) => setTimeout(r, 300));
  }
  rpc.send({ type: "abort" });
  const ended = await rpc.waitFor((e) => rpc.events.indexOf(e) >= from && e.type === "tool_execution_end");
  expect(ended.isError).toBe(true);
  expect(resultText(ended)).toContain("Command aborted");
  await rpc.waitFor((e) => rpc.events.indexOf(e) >= from && e.type === "agent_settled");
  const left = await call({
    action: "exec",
    name: "dev",
    // [p] keeps this shell's own command line from matching.
    cmd: "pgrep -f 'slee[p] 97' || echo none; ls /tmp/finished 2>&1",
  });
  expect(left.output).toMatch(/^none\n.*No such file/s);
});

test("attached, a guest request to a host off allowedHosts waits for the user's answer in Pi's select", async () => {
  // The name never resolves (.invalid): let out, the host's lookup of it fails (Gondolin's 400); refused, its 403.
  const curl = (path: string) =>
    call({
      action: "exec",
      name: "dev",
      cmd: `curl -s -o /dev/null -w '%{http_code}' --max-time 90 http://approve-me.invalid/${path}`,
      timeoutMs: 60_000,
    });
  const question = "dev wants to reach approve-me.invalid:80 (HTTP GET), which its allowedHosts do not list. Let it?";
  const answer = async (from: number, value: string) => {
    const pick = await rpc.waitFor(
      (e) => rpc.events.indexOf(e) >= from && ui("select", (s) => s.title === question)(e),
    );
    expect(pick.options).toEqual(["Allow once", "Allow for this instance", "Deny"]);
    rpc.send({ type: "extension_ui_response", id: pick.id, value });
  };
  let from = rpc.events.length;
  const allowed = curl("first");
  await answer(from, "Allow once");
  expect((await allowed).output).toBe("400");
  from = rpc.events.length;
  const refused = curl("second");
  await answer(from, "Deny");
  expect((await refused).output).toBe("403");
  // Nothing reached the model: no request went to it while the guest waited.
  expect(JSON.stringify(fake.requests)).not.toContain("approve-me.invalid");

  const view = await call({ action: "egress", name: "dev" });
  expect(view.hosts).toContainEqual(
    expect.objectContaining({ host: "approve-me.invalid", allowed: 1, denied: 1, lastRule: "denied by the user" }),
  );
  expect(view.grants).toEqual([]);
  const trust = (await call({ action: "audit", name: "dev", kind: ["trust"], last: 10 })).entries as Json[];
  expect(trust.map((e) => [e.data.answer, e.data.by, e.data.couldAnswer])).toEqual([
    ["approved once", "pi", ["pi"]],
    ["denied by the user", "pi", ["pi"]],
  ]);
});

test("detach returns the tools to the host; a stopped instance detaches Pi and refuses a new attach", async () => {
  let from = rpc.events.length;
  rpc.send({ type: "prompt", message: "/sandbox detach" });
  expect((await notifyAfter(from)).message).toMatch(/^Detached from dev: read, bash/);
  const [onHost] = await run("where am I", { tool: "bash", args: { command: "uname -n" } });
  expect(resultText(onHost!).trim()).toBe(hostname());
  expect(onHost!.result.details?.sandbox).toBeUndefined();

  from = rpc.events.length;
  rpc.send({ type: "prompt", message: "/sandbox attach dev" });
  expect((await notifyAfter(from)).message).toMatch(/^Attached to dev/);
  expect((await call({ action: "stop", name: "dev" })).state).toBe("stopped");
  // The footer's next look sees it and detaches, telling the user and the model.
  const gone = await rpc.waitFor(
    (e) => rpc.events.indexOf(e) >= from && ui("notify", (n) => /Detached from dev/.test(n.message))(e),
    30_000,
  );
  expect(gone.notifyType).toBe("warning");
  expect(gone.message).toMatch(/^dev is (stopping|stopped)\. Detached from dev: read, bash/);
  const [afterStop] = await run("where now", { tool: "bash", args: { command: "uname -n" } });
  expect(resultText(afterStop!).trim()).toBe(hostname());
  expect(JSON.stringify(fake.requests.at(-1)!.messages)).toMatch(/dev is (stopping|stopped)\. Pi is detached/);

  from = rpc.events.length;
  rpc.send({ type: "prompt", message: "/sandbox attach dev" });
  const refused = await notifyAfter(from);
  expect(refused.notifyType).toBe("error");
  expect(refused.message).toMatch(/^CONTROLLER_NOT_RUNNING: .*\nHint: .*start/s);
});
