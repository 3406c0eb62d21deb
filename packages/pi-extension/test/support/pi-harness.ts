// Runs a real Pi 1.6 process headlessly: an isolated agent dir whose models.json points at the
// fake OpenAI server, retries off, offline, no session files, HOME and the state root in a temp dir.

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { FakeOpenAI } from "./fake-openai.js";

/** A loose JSON object: events and results as the tests read them. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- events and results are loose JSON in tests
export type Json = Record<string, any>;

/** This package's root (the directory Pi loads with `-e`). */
export const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Pi's CLI entry, found in the nearest node_modules. */
export function piCli(): string {
  for (let dir = PACKAGE_DIR; dir !== dirname(dir); dir = dirname(dir)) {
    const candidate = join(dir, "node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js");
    if (existsSync(candidate)) return candidate;
  }
  throw new Error("@earendil-works/pi-coding-agent is not installed (it is a dev dependency of this package)");
}

/** An isolated Pi home. */
export interface PiHome {
  /** Temp root holding everything below. */
  dir: string;
  /** PI_CODING_AGENT_DIR. */
  agentDir: string;
  /** Working directory Pi runs in. */
  workDir: string;
  /** PI_SANDBOX_HOME: short, because daemon sockets live below it. */
  stateRoot: string;
  /** Environment for Pi and for callAction in the test. */
  env: NodeJS.ProcessEnv;
}

/** Creates an agent dir wired to the fake server. */
export async function makePiHome(fake: FakeOpenAI, prefix = "psp-"): Promise<PiHome> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const agentDir = join(dir, "agent");
  const workDir = join(dir, "work");
  const stateRoot = join(dir, "st");
  await mkdir(agentDir);
  await mkdir(workDir);
  await mkdir(join(dir, "home"));
  const models = {
    providers: {
      fake: { baseUrl: fake.baseUrl, api: "openai-completions", apiKey: "dummy", models: [{ id: "fake-model" }] },
    },
  };
  await writeFile(join(agentDir, "models.json"), JSON.stringify(models, null, 2));
  await writeFile(join(agentDir, "settings.json"), JSON.stringify({ retry: { enabled: false } }));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: join(dir, "home"),
    // The guest test image lives in the user's image cache; with HOME moved, name that cache, as
    // a model's config may boot an image from it (like a name) without the user's yes.
    XDG_CACHE_HOME: process.env.XDG_CACHE_HOME || join(homedir(), ".cache"),
    PI_CODING_AGENT_DIR: agentDir,
    PI_OFFLINE: "1",
    PI_SKIP_VERSION_CHECK: "1",
    PI_SANDBOX_HOME: stateRoot,
    // The daemon needs Node 24; the jest process runs on it.
    PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ""}`,
  };
  return { dir, agentDir, workDir, stateRoot, env };
}

/** Standard flags: the fake model, no session file. */
export const FAKE_MODEL_ARGS = ["--no-session", "--model", "fake/fake-model"];

/** Outcome of a finished Pi process. */
export interface PiRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON lines (json and rpc modes); other lines are skipped. */
  events: Json[];
}

function parseLines(text: string): Json[] {
  const out: Json[] = [];
  for (const line of text.split("\n")) {
    const trimmed = line.replace(/\r$/, "").trim();
    if (!trimmed.startsWith("{")) continue;
    try {
      out.push(JSON.parse(trimmed) as Json);
    } catch {
      // not an event line
    }
  }
  return out;
}

function spawnPi(home: PiHome, args: string[], env: NodeJS.ProcessEnv = home.env): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, [piCli(), ...args], { cwd: home.workDir, env, stdio: ["pipe", "pipe", "pipe"] });
}

/** Runs Pi to completion (killing it after `timeoutMs`). */
export function runPi(
  home: PiHome,
  args: string[],
  options: { timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<PiRun> {
  const child = spawnPi(home, args, options.env);
  child.stdin.end();
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`pi ${args.join(" ")} did not exit within ${options.timeoutMs ?? 120_000} ms\n${stderr}`));
    }, options.timeoutMs ?? 120_000);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr, events: parseLines(stdout) });
    });
  });
}

/** Pi in RPC mode: JSON commands in, events out. */
export class PiRpc {
  readonly events: Json[] = [];
  stderr = "";
  #buffer = "";
  #waiters: { match: (e: Json) => boolean; resolve: (e: Json) => void }[] = [];
  #exited: Promise<number | null>;

  private constructor(private readonly child: ChildProcessWithoutNullStreams) {
    child.stdout.on("data", (c: Buffer) => {
      this.#buffer += c.toString("utf8");
      let i: number;
      while ((i = this.#buffer.indexOf("\n")) !== -1) {
        const line = this.#buffer.slice(0, i);
        this.#buffer = this.#buffer.slice(i + 1);
        for (const event of parseLines(line)) {
          this.events.push(event);
          this.#waiters = this.#waiters.filter((w) => {
            if (!w.match(event)) return true;
            w.resolve(event);
            return false;
          });
        }
      }
    });
    child.stderr.on("data", (c: Buffer) => (this.stderr += c.toString("utf8")));
    this.#exited = new Promise((resolvePromise) => child.once("close", (code) => resolvePromise(code)));
  }

  /** Starts `pi --mode rpc` with the given extra arguments. */
  static start(home: PiHome, args: string[]): PiRpc {
    return new PiRpc(spawnPi(home, [...FAKE_MODEL_ARGS, "--mode", "rpc", ...args]));
  }

  /** Sends one command line. */
  send(command: Record<string, unknown>): void {
    this.child.stdin.write(`${JSON.stringify(command)}\n`);
  }

  /** Resolves with the first event (past or future) that matches. */
  waitFor(match: (e: Json) => boolean, timeoutMs = 60_000): Promise<Json> {
    const seen = this.events.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolvePromise, reject) => {
      const timer = setTimeout(() => {
        const recent = this.events.slice(-12).map((e) => JSON.stringify(e).slice(0, 300));
        reject(
          new Error(
            `no matching RPC event within ${timeoutMs} ms\nrecent events:\n${recent.join("\n")}\nstderr:\n${this.stderr}`,
          ),
        );
      }, timeoutMs);
      this.#waiters.push({
        match,
        resolve: (e) => {
          clearTimeout(timer);
          resolvePromise(e);
        },
      });
    });
  }

  /** Closes stdin (Pi shuts down in order) and waits for the exit, killing after a deadline. */
  async close(timeoutMs = 30_000): Promise<number | null> {
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
    try {
      return await this.#exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

/** The tool_execution_end events of a run. */
export function toolEnds(events: Json[]): Json[] {
  return events.filter((e) => e.type === "tool_execution_end");
}

/** The text of a tool result event. */
export function resultText(event: Json): string {
  return (event.result?.content ?? []).map((c: { text?: string }) => c.text ?? "").join("");
}
