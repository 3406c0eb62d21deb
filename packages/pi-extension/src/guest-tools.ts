// Pi's built-in tools pointed at an attached instance: their own definitions (schemas, prompts,
// truncation, rendering) with operations that run in the guest. grep has no operations for the
// search itself, so its execute is replaced by a guest search with Pi's output format and limits.

import { posix } from "node:path";
import {
  DEFAULT_MAX_BYTES,
  createBashToolDefinition,
  createEditToolDefinition,
  createFindToolDefinition,
  createLsToolDefinition,
  createReadToolDefinition,
  createWriteToolDefinition,
  createGrepToolDefinition,
  formatSize,
  truncateHead,
  truncateLine,
  type BashOperations,
  type EditOperations,
  type FindOperations,
  type GrepToolDetails,
  type GrepToolInput,
  type LsOperations,
  type ReadOperations,
  type ToolDefinition,
  type WriteOperations,
} from "@earendil-works/pi-coding-agent";
import { shellQuote } from "@pi-sandbox/config";
import { GuestInstance } from "./guest.js";

/** Names of the tools an attach routes, in Pi's order. */
export const ROUTED_TOOLS = ["read", "bash", "edit", "write", "grep", "find", "ls"] as const;
export type RoutedToolName = (typeof ROUTED_TOOLS)[number];

/** Most bytes a listing or search command prints (under the 64 KiB exec output cap). */
const LISTING_MAX_BYTES = 60_000;
/** Largest file streamed to the read tool (it keeps only the lines it shows). */
const STREAM_MAX_BYTES = 64 * 1024 * 1024;
const DEFAULT_GREP_LIMIT = 100;
const IMAGE_TYPES: Record<string, string> = {
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".gif": "image/gif",
  ".webp": "image/webp",
};

/** Splits a bounded listing into lines; a listing that hit the byte cap loses its partial last line. */
function listingLines(output: string): { lines: string[]; cut: boolean } {
  const cut = Buffer.byteLength(output, "utf8") >= LISTING_MAX_BYTES;
  const lines = output.split("\n");
  if (cut) lines.pop();
  return { lines: lines.filter((l) => l !== ""), cut };
}

const STDERR_MARK = "\n\u0001pi-sandbox-stderr\n";

/**
 * Runs a listing or search command with its output bounded and its stderr kept apart (the exit
 * status of a pipeline is head's, so errors are told by stderr with no output).
 */
async function runBounded(
  guest: GuestInstance,
  command: string,
  signal?: AbortSignal,
): Promise<{ lines: string[]; cut: boolean; stderr: string }> {
  const cmd = [
    `e=$(mktemp) || exit 1`,
    `(${command}) 2>"$e" | head -c ${LISTING_MAX_BYTES}`,
    `printf '${STDERR_MARK.replace(/\n/g, "\\n").replace("\u0001", "\\001")}'; head -c 2000 "$e"; rm -f "$e"`,
  ].join("\n");
  const { output: raw } = await guest.run(cmd, signal);
  if (signal?.aborted) throw new Error("Operation aborted");
  const mark = raw.lastIndexOf(STDERR_MARK);
  const output = mark >= 0 ? raw.slice(0, mark) : raw;
  const stderr = mark >= 0 ? raw.slice(mark + STDERR_MARK.length).trim() : "";
  return { ...listingLines(output), stderr };
}

function readOps(guest: GuestInstance): ReadOperations {
  return {
    readFile: (path) => guest.readFile(path),
    access: (path) => guest.checkReadable(path),
    detectImageMimeType: async (path) => IMAGE_TYPES[posix.extname(path).toLowerCase()] ?? null,
    createReadStream: (path, options) => guest.readStream(path, { signal: options.signal, maxBytes: STREAM_MAX_BYTES }),
  };
}

function writeOps(guest: GuestInstance): WriteOperations {
  return { writeFile: (path, content) => guest.writeFile(path, content), mkdir: (dir) => guest.mkdir(dir) };
}

function editOps(guest: GuestInstance): EditOperations {
  return {
    readFile: (path) => guest.readFile(path),
    writeFile: (path, content) => guest.writeFile(path, content),
    access: (path) => guest.checkReadable(path, true),
  };
}

function bashOps(guest: GuestInstance): BashOperations {
  // The host's environment (API keys among it) never goes into the guest: `env` is not passed.
  return {
    exec: (command, cwd, { onData, signal, timeout }) =>
      guest.stream(command, cwd, { onData, signal, timeoutSeconds: timeout }),
  };
}

async function kindOf(guest: GuestInstance, path: string): Promise<"dir" | "file" | "none"> {
  const q = shellQuote(path);
  const { output } = await guest.run(
    `if [ -d ${q} ]; then echo dir; elif [ -e ${q} ]; then echo file; else echo none; fi`,
  );
  const kind = output.trim();
  return kind === "dir" || kind === "file" ? kind : "none";
}

function lsOps(guest: GuestInstance): LsOperations {
  // One listing per directory; the per-entry stats that follow are answered from it.
  const dirs = new Set<string>();
  const listed = new Set<string>();
  return {
    exists: async (path) => (await kindOf(guest, path)) !== "none",
    stat: async (path) => {
      if (listed.has(posix.dirname(path))) {
        const isDir = dirs.has(path);
        return { isDirectory: () => isDir };
      }
      const kind = await kindOf(guest, path);
      if (kind === "none") throw new Error(`ENOENT: no such file or directory, stat '${path}'`);
      return { isDirectory: () => kind === "dir" };
    },
    readdir: async (path) => {
      const { exitCode, output } = await guest.run(
        `cd -- ${shellQuote(path)} 2>&1 || exit 2; ls -A -1 -p 2>&1 | head -c ${LISTING_MAX_BYTES}`,
      );
      if (exitCode !== 0) throw new Error(output.trim().slice(0, 200) || `cannot list ${path}`);
      const names: string[] = [];
      for (const line of listingLines(output).lines) {
        const isDir = line.endsWith("/");
        const entry = isDir ? line.slice(0, -1) : line;
        if (entry === "" || entry.includes("/")) continue;
        names.push(entry);
        if (isDir) dirs.add(posix.join(path, entry));
      }
      listed.add(posix.normalize(path));
      return names;
    },
  };
}

function findOps(guest: GuestInstance): FindOperations {
  return {
    exists: async (path) => (await kindOf(guest, path)) !== "none",
    glob: async (pattern, root, { limit }) => {
      const normalized = pattern.replace(/^(?:\.\/)+/, "");
      const isPath = normalized.includes("/");
      let cmd: string;
      if (guest.facts.fd) {
        // As Pi runs fd locally: a pattern with '/' matches the path below the root, one without a name.
        const args = ["--color=never", "--hidden", "--glob", "--max-results", String(limit)];
        args.push("--exclude", ".git", "--exclude", "node_modules");
        let effective = normalized;
        if (isPath && !normalized.startsWith("/")) {
          args.push("--full-path");
          effective = `${root.replace(/\/+$/, "").replace(/[\\*?[\]{}]/g, "\\$&")}/${normalized}`;
          if (normalized === normalized.toLowerCase()) args.push("--ignore-case");
        }
        cmd = `${guest.facts.fd} ${args.map(shellQuote).join(" ")} -- ${shellQuote(effective)} ${shellQuote(root)} | head -n ${limit}`;
      } else {
        // find's -path lets * cross '/', so `a/**/b` becomes `a/*b`-like matching at any depth.
        const test = isPath
          ? `-path ${shellQuote(`${root.replace(/\/+$/, "")}/${normalized.replace(/\/\*\*\//g, "/*").replace(/\*\*/g, "*")}`)}`
          : `-name ${shellQuote(normalized)}`;
        cmd = `find ${shellQuote(root)} \\( -name .git -o -name node_modules \\) -prune -o ${test} -print | head -n ${limit}`;
      }
      const { lines, stderr } = await runBounded(guest, cmd);
      if (lines.length === 0 && stderr) throw new Error(stderr.slice(0, 500));
      return lines;
    },
  };
}

/** Parses `path\0line:text` (match) or `path\0line-text` (context) as grep and rg print with --null. */
function parseHit(line: string): { path: string; line: number; text: string; match: boolean } | undefined {
  const nul = line.indexOf("\0");
  if (nul <= 0) return undefined;
  const rest = /^(\d+)([:-])([\s\S]*)$/.exec(line.slice(nul + 1));
  if (!rest) return undefined;
  return {
    path: line.slice(0, nul).replace(/^\.\//, ""),
    line: Number(rest[1]),
    text: rest[3] ?? "",
    match: rest[2] === ":",
  };
}

/** Pi's grep, run in the guest: rg when it is there, else grep (-P when it takes it). */
async function guestGrep(
  guest: GuestInstance,
  cwd: string,
  params: GrepToolInput,
  signal: AbortSignal | undefined,
): Promise<{ content: { type: "text"; text: string }[]; details: GrepToolDetails | undefined }> {
  const searchPath = posix.resolve(cwd, (params.path ?? ".").replace(/^@/, ""));
  const kind = await kindOf(guest, searchPath);
  if (kind === "none") throw new Error(`Path not found: ${searchPath}`);
  const isDir = kind === "dir";
  const context = params.context && params.context > 0 ? Math.floor(params.context) : 0;
  const limit = Math.max(1, Math.floor(params.limit ?? DEFAULT_GREP_LIMIT));
  const glob = params.glob?.replace(/^(!?)(?:\.\/)+/, "$1");
  let args: string[];
  if (guest.facts.rg) {
    args = [
      "rg",
      "--no-config",
      "--line-number",
      "--color=never",
      "--hidden",
      "--no-heading",
      "--with-filename",
      "--null",
    ];
    if (params.ignoreCase) args.push("--ignore-case");
    if (params.literal) args.push("--fixed-strings");
    if (glob) args.push("--glob", glob);
  } else {
    args = ["grep", "-nH", "--null", "--color=never", "--no-group-separator", "-I"];
    if (isDir) args.push("-r", "--exclude-dir=.git", "--exclude-dir=node_modules");
    if (params.ignoreCase) args.push("-i");
    args.push(params.literal ? "-F" : guest.facts.grepPcre ? "-P" : "-E");
    if (glob) args.push(glob.startsWith("!") ? `--exclude=${glob.slice(1)}` : `--include=${glob}`);
  }
  if (context > 0) args.push(guest.facts.rg ? "--context" : "-C", String(context));
  args.push(guest.facts.rg ? "--" : "-e", params.pattern);
  if (!guest.facts.rg) args.push("--");
  args.push(isDir ? "." : searchPath);
  const dir = isDir ? searchPath : posix.dirname(searchPath);
  const { lines, cut, stderr } = await runBounded(
    guest,
    `cd -- ${shellQuote(dir)} && ${args.map(shellQuote).join(" ")}`,
    signal,
  );

  const out: string[] = [];
  const details: GrepToolDetails = {};
  let matches = 0;
  let limitHit = false;
  let lastFile = "";
  let trailingEnd = 0;
  let linesTruncated = false;
  for (const line of lines) {
    const hit = parseHit(line);
    if (!hit) continue;
    if (limitHit) {
      if (hit.match) {
        details.matchLimitReached = limit;
        break;
      }
      if (hit.path !== lastFile || hit.line > trailingEnd) break;
    }
    const shown = isDir ? hit.path : posix.basename(hit.path);
    const { text, wasTruncated } = truncateLine(hit.text.replace(/\r$/, ""));
    if (wasTruncated) linesTruncated = true;
    out.push(hit.match ? `${shown}:${hit.line}: ${text}` : `${shown}-${hit.line}- ${text}`);
    lastFile = hit.path;
    if (hit.match && ++matches >= limit && !limitHit) {
      limitHit = true;
      trailingEnd = hit.line + context;
    }
  }
  if (matches === 0) {
    if (stderr) throw new Error(stderr.slice(0, 500));
    return { content: [{ type: "text", text: "No matches found" }], details: undefined };
  }
  const truncation = truncateHead(out.join("\n"), { maxLines: Number.MAX_SAFE_INTEGER });
  let text = truncation.content;
  const notices: string[] = [];
  if (details.matchLimitReached) {
    notices.push(`${limit} matches limit reached. Use limit=${limit * 2} for more, or refine pattern`);
  }
  if (truncation.truncated || cut) {
    notices.push(`${formatSize(DEFAULT_MAX_BYTES)} limit reached`);
    if (truncation.truncated) details.truncation = truncation;
  }
  if (linesTruncated) {
    notices.push("Some lines truncated. Use read tool to see full lines");
    details.linesTruncated = true;
  }
  if (notices.length > 0) text += `\n\n[${notices.join(". ")}]`;
  return { content: [{ type: "text", text }], details: Object.keys(details).length > 0 ? details : undefined };
}

/** A routed tool definition: any parameters and details (each tool keeps its own). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the seven tools have different schemas
export type AnyToolDefinition = ToolDefinition<any, any, any>;

/** The built-in tool `name` with operations in the guest; its cwd is the guest workspace. */
export function guestToolDefinition(name: RoutedToolName, guest: GuestInstance): AnyToolDefinition {
  const cwd = guest.facts.workspace;
  switch (name) {
    case "read":
      return createReadToolDefinition(cwd, { operations: readOps(guest) });
    case "bash":
      return createBashToolDefinition(cwd, { operations: bashOps(guest), exposeSessionEnvironment: false });
    case "edit":
      return createEditToolDefinition(cwd, { operations: editOps(guest) });
    case "write":
      return createWriteToolDefinition(cwd, { operations: writeOps(guest) });
    case "ls":
      return createLsToolDefinition(cwd, { operations: lsOps(guest) });
    case "find":
      return createFindToolDefinition(cwd, { operations: findOps(guest) });
    case "grep": {
      const definition = createGrepToolDefinition(cwd);
      const execute: typeof definition.execute = (_id, params, signal) => guestGrep(guest, cwd, params, signal);
      return { ...definition, execute } as typeof definition as AnyToolDefinition;
    }
  }
}

/** The Pi settings the host tools take. */
export interface HostToolSettings {
  shellPath?: string;
  shellCommandPrefix?: string;
  images?: { autoResize?: boolean };
}

/** The same tool on the host, as Pi builds it from its settings (used while nothing is attached). */
export function hostToolDefinition(name: RoutedToolName, cwd: string, settings: HostToolSettings): AnyToolDefinition {
  switch (name) {
    case "read":
      return createReadToolDefinition(cwd, { autoResizeImages: settings.images?.autoResize ?? true });
    case "bash":
      return createBashToolDefinition(cwd, {
        shellPath: settings.shellPath,
        commandPrefix: settings.shellCommandPrefix,
      });
    case "edit":
      return createEditToolDefinition(cwd);
    case "write":
      return createWriteToolDefinition(cwd);
    case "ls":
      return createLsToolDefinition(cwd);
    case "find":
      return createFindToolDefinition(cwd);
    case "grep":
      return createGrepToolDefinition(cwd);
  }
}
