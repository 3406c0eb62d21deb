// A scripted GuestSession for orchestration tests: keeps written files in memory, answers the
// refresh's commands by shape, and records every command in order.
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import type { GuestResult, GuestSession } from "../../src/guest.js";

export interface FakeGuestOptions {
  /** Exit code of a step command containing this text, e.g. { "npm ci": 1 }. */
  failing?: Record<string, number>;
  /** Flip one byte of the uploaded archive before hashing. */
  corrupt?: boolean;
  /** Output of the live check command. */
  liveOutput?: string;
  /** Tools reported missing by the probe. */
  missing?: string[];
  /** `node --version` in the guest (default v24.22.3; not reported when node is missing). */
  nodeVersion?: string;
  /** The guest's environment (secret placeholders), as the live step's auth.json writer reads it. */
  env?: Record<string, string>;
  /** Herdr in the guest: absent (default), installing fine, or failing with this output. */
  herdr?: "absent" | "installed" | { failOutput: string };
  /** Called when a step command containing this text starts; the step waits for the promise. */
  blockOn?: { needle: string; until: Promise<void>; started: () => void };
}

export class FakeGuest implements GuestSession {
  readonly commands: string[] = [];
  readonly files = new Map<string, string>();
  /** Files copied in with `upload`, by guest path. */
  readonly uploads = new Map<string, Buffer>();
  current: string | undefined;

  constructor(private readonly options: FakeGuestOptions = {}) {}

  async exec(cmd: string): Promise<GuestResult> {
    this.commands.push(cmd);
    if (cmd.startsWith("pwd;")) {
      const missing = this.options.missing ?? [];
      const version = missing.includes("node") ? "" : `node-version:${this.options.nodeVersion ?? "v24.22.3"}\n`;
      return { exitCode: 0, output: "/workspace\n" + missing.map((t) => `missing:${t}\n`).join("") + version };
    }
    const block = this.options.blockOn;
    if (block && cmd.includes(block.needle)) {
      block.started();
      await block.until;
    }
    if (cmd.startsWith("readlink")) return { exitCode: 0, output: this.current ? `${this.current}\n` : "" };
    if (cmd.startsWith("ln -sfn")) {
      this.current = /ln -sfn (\S+)/.exec(cmd)![1];
      return { exitCode: 0, output: "" };
    }
    if (cmd.includes("--mode json")) return { exitCode: 0, output: this.options.liveOutput ?? "" };
    if (cmd.includes("stat -c %a")) return { exitCode: 0, output: "600\n" };
    if (cmd.includes('{type:"api_key",key}')) {
      // The live step's auth.json writer: `node -e … <auth.json> <models.json> <provider> <NAME> ['<entry>']`.
      const [, auth, , provider, name, entry] = / (\S+) (\S+) (\S+) (\S+)(?: '(\{.*\})')?$/.exec(cmd)!;
      const key = this.options.env?.[name!];
      if (!key && !entry) return { exitCode: 3, output: `the guest has no ${name} in its environment\n` };
      const stored = this.files.has(auth!) ? (JSON.parse(this.files.get(auth!)!) as Record<string, unknown>) : {};
      stored[provider!] = entry ? (JSON.parse(entry) as unknown) : { type: "api_key", key };
      this.files.set(auth!, JSON.stringify(stored));
      return { exitCode: 0, output: "stored 600\n" };
    }
    if (cmd.includes("command -v herdr")) {
      const herdr = this.options.herdr ?? "absent";
      if (herdr === "absent" || herdr === "installed") return { exitCode: 0, output: `herdr:${herdr}\n` };
      return { exitCode: 0, output: `herdr:failed:1\n${herdr.failOutput}` };
    }
    for (const [needle, code] of Object.entries(this.options.failing ?? {})) {
      if (cmd.includes(needle)) return { exitCode: code, output: `npm error ${needle} failed\n` };
    }
    return { exitCode: 0, output: "" };
  }

  async write(path: string, content: string): Promise<void> {
    this.files.set(path, content);
  }

  async upload(hostPath: string, guestPath: string): Promise<{ sha256: string; bytes: number }> {
    const bytes = await readFile(hostPath);
    if (this.options.corrupt) bytes[0] = (bytes[0] ?? 0) ^ 1;
    this.uploads.set(guestPath, bytes);
    return { sha256: createHash("sha256").update(bytes).digest("hex"), bytes: bytes.length };
  }

  async read(path: string): Promise<string> {
    const content = this.files.get(path);
    if (content === undefined) throw new Error(`no such file ${path}`);
    return content;
  }
}
