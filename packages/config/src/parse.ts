// Reading and parsing sandbox.yaml: YAML with positions, schema validation, cross-field rules,
// every issue with its path, line and column.
import { open } from "node:fs/promises";
import { resolve } from "node:path";
import type { Document, LineCounter, Node } from "yaml";
import { dottedPath } from "./describe.js";
import { ConfigError, formatConfigIssue, type ConfigIssue } from "./errors.js";
import { escapeControlChars } from "./control-chars.js";
import { LIMITS } from "./limits.js";
import { normaliseConfig } from "./normalise.js";
import { crossFieldIssues } from "./rules.js";
import type { SandboxConfig } from "./types.js";
import { validateStructure, type LocatedIssue, type Segment } from "./validate.js";
import { yamlLib } from "./yaml-lib.js";

/** Options of {@link parseConfig}. */
export interface ParseConfigOptions {
  /** Where the text came from: names the file in messages and anchors a relative `image`. */
  sourcePath?: string;
}

/** Options of {@link loadConfig}. */
export interface LoadConfigOptions {
  /** Cancels the read; the promise rejects with `signal.reason`. */
  signal?: AbortSignal;
}

interface Position {
  line: number;
  column: number;
}

function fileLabel(sourcePath: string | undefined): string {
  return sourcePath === undefined ? "sandbox config" : sourcePath;
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

function fail(
  code: "CONFIG_YAML_SYNTAX" | "CONFIG_INVALID",
  issues: ConfigIssue[],
  sourcePath: string | undefined,
): never {
  const what = code === "CONFIG_YAML_SYNTAX" ? "is not valid YAML" : "is not a valid sandbox.yaml";
  const header = `${fileLabel(sourcePath)} ${what} (${plural(issues.length, "problem")}):`;
  const hint =
    code === "CONFIG_YAML_SYNTAX"
      ? "fix the YAML at the positions shown and try again"
      : "fix the keys listed and try again; the package README has the full key reference";
  throw new ConfigError(code, [header, ...issues.map((issue) => `  ${formatConfigIssue(issue)}`)].join("\n"), {
    issues,
    hint,
    details: sourcePath === undefined ? {} : { sourcePath },
  });
}

function syntaxMessage(error: { code: string; message: string }): string {
  const first = (error.message.split("\n")[0] ?? "").replace(/ at line \d+, column \d+:?$/, "");
  if (error.code === "MULTIPLE_DOCS") return "the file holds more than one YAML document (a second ---); keep one";
  return `YAML syntax: ${escapeControlChars(first)}`;
}

/** Finds the node at `segments`, or the nearest existing ancestor's key when it does not exist. */
function locate(
  doc: Document,
  counter: LineCounter,
  segments: readonly Segment[],
  at: "key" | "value",
): Position | undefined {
  const { isAlias, isMap, isScalar, isSeq } = yamlLib();
  const position = (node: { range?: [number, number, number] | null } | null | undefined): Position | undefined => {
    const offset = node?.range?.[0];
    if (offset === undefined) return undefined;
    const { line, col } = counter.linePos(offset);
    return { line, column: col };
  };
  const resolveAlias = (node: unknown): unknown => (isAlias(node) ? node.resolve(doc) : node);
  let node = resolveAlias(doc.contents);
  // Missing keys point at their parent's key (`web:`), so the position of a value is only taken
  // when it is the node asked for, or a list item (which has no key of its own).
  let best = position(node as Node | null) ?? { line: 1, column: 1 };
  for (let index = 0; index < segments.length; index++) {
    const segment = segments[index]!;
    const isLast = index === segments.length - 1;
    if (isMap(node)) {
      const pair = node.items.find((item) => isScalar(item.key) && String(item.key.value) === String(segment));
      if (!pair) return best;
      best = position(pair.key as Node) ?? best;
      if (isLast && at === "key") return best;
      node = resolveAlias(pair.value);
      if (node === null || node === undefined) return best;
      if (isLast) return position(node as Node) ?? best;
    } else if (isSeq(node) && typeof segment === "number") {
      node = resolveAlias(node.items[segment]);
      if (node === null || node === undefined) return best;
      best = position(node as Node) ?? best;
    } else return best;
  }
  return best;
}

/** The first alias whose anchor is missing, for a position when `toJS` refuses the document. */
function firstBadAlias(doc: Document): Node | undefined {
  const { visit } = yamlLib();
  let found: Node | undefined;
  visit(doc, {
    Alias(_key, node) {
      if (node.resolve(doc) === undefined) {
        found = node;
        return visit.BREAK;
      }
      return undefined;
    },
  });
  return found;
}

/** Most duplicate-key issues reported at once: a file written by a guest may hold thousands. */
const MAX_DUPLICATE_ISSUES = 20;

/** Keys that appear more than once in the same mapping, in one pass over the document. */
function duplicateKeys(doc: Document, counter: LineCounter): ConfigIssue[] {
  const { isScalar, visit } = yamlLib();
  const issues: ConfigIssue[] = [];
  visit(doc, {
    Map(_key, map) {
      if (issues.length >= MAX_DUPLICATE_ISSUES) return visit.BREAK;
      const seen = new Set<unknown>();
      for (const pair of map.items) {
        const key = isScalar(pair.key) ? pair.key.value : pair.key;
        if (!seen.has(key)) {
          seen.add(key);
          continue;
        }
        const offset = (pair.key as Node | null)?.range?.[0];
        const where = offset === undefined ? undefined : counter.linePos(offset);
        if (issues.length >= MAX_DUPLICATE_ISSUES) break;
        issues.push({
          path: "",
          message: `the key \`${escapeControlChars(String(key))}\` appears more than once in the same mapping; keep only one`,
          ...(where ? { line: where.line, column: where.col } : {}),
        });
      }
      return undefined;
    },
  });
  return issues;
}

function byPosition(a: ConfigIssue, b: ConfigIssue): number {
  return (a.line ?? Infinity) - (b.line ?? Infinity) || (a.column ?? Infinity) - (b.column ?? Infinity);
}

/**
 * Parses and validates sandbox.yaml text into a fully defaulted config. Pure apart from resolving
 * a relative `image` against `sourcePath` (or the working directory). Throws a ConfigError listing
 * every problem: `CONFIG_YAML_SYNTAX`, `CONFIG_INVALID` or `CONFIG_TOO_LARGE`.
 */
export function parseConfig(text: string, options: ParseConfigOptions = {}): SandboxConfig {
  const { isMap, isScalar, LineCounter, parseDocument } = yamlLib();
  const { sourcePath } = options;
  const size = Buffer.byteLength(text, "utf8");
  if (size > LIMITS.yamlMaxBytes) throw tooLarge(sourcePath, size);

  const counter = new LineCounter();
  // Duplicate keys are found below in one pass: the yaml library's own check compares every key
  // with every other, which takes seconds on a mapping of thousands of keys (a hostile file).
  const doc = parseDocument(text, { lineCounter: counter, prettyErrors: true, uniqueKeys: false, logLevel: "error" });
  const syntax = doc.errors.map((error): ConfigIssue => {
    const start = error.linePos?.[0];
    return {
      path: "",
      message: syntaxMessage(error),
      ...(start ? { line: start.line, column: start.col } : {}),
    };
  });
  syntax.push(...duplicateKeys(doc, counter));
  if (syntax.length > 0) fail("CONFIG_YAML_SYNTAX", syntax.sort(byPosition), sourcePath);

  // A file written by a hostile guest may declare thousands of services: refuse it by counting
  // before anything walks them (validation, references), so the refusal costs milliseconds.
  const services = isMap(doc.contents) ? doc.contents.get("services", true) : undefined;
  if (isMap(services) && services.items.length > LIMITS.servicesMax) {
    const key = isMap(doc.contents)
      ? doc.contents.items.find((p) => isScalar(p.key) && p.key.value === "services")
      : undefined;
    const where = (key?.key as Node | undefined)?.range ? counter.linePos((key!.key as Node).range![0]) : undefined;
    fail(
      "CONFIG_INVALID",
      [
        {
          path: "services",
          message: `declares ${services.items.length} services; at most ${LIMITS.servicesMax} are allowed per sandbox.yaml`,
          ...(where ? { line: where.line, column: where.col } : {}),
        },
      ],
      sourcePath,
    );
  }

  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: LIMITS.yamlMaxAliasCount });
  } catch (error) {
    const alias = firstBadAlias(doc);
    const where = alias?.range ? counter.linePos(alias.range[0]) : undefined;
    const excessive = error instanceof Error && /Excessive alias count/.test(error.message);
    const message = excessive
      ? `the file expands YAML aliases more than ${LIMITS.yamlMaxAliasCount} times; write the values out instead of nesting aliases`
      : alias
        ? `the alias *${String((alias as { source?: string }).source)} refers to an anchor that is not defined before it`
        : `the YAML could not be read: ${error instanceof Error ? error.message : String(error)}`;
    fail(
      "CONFIG_YAML_SYNTAX",
      [{ path: "", message, ...(where ? { line: where.line, column: where.col } : {}) }],
      sourcePath,
    );
  }
  // An empty file (or one with only comments) is an empty mapping, so the user hears what is missing.
  if (raw === null || raw === undefined) raw = {};

  const structure = validateStructure(raw);
  const located: LocatedIssue[] = [...structure.issues, ...crossFieldIssues(raw)];
  if (located.length > 0 || !structure.output) {
    const seen = new Set<string>();
    const issues: ConfigIssue[] = [];
    for (const issue of located) {
      const path = dottedPath(issue.segments);
      // One issue per path: a value that breaks several checks at once reads best as one sentence.
      if (seen.has(path)) continue;
      seen.add(path);
      const where = locate(doc, counter, issue.segments, issue.at);
      issues.push({ path, message: issue.message, ...(where ? { line: where.line, column: where.column } : {}) });
    }
    fail("CONFIG_INVALID", issues.sort(byPosition), sourcePath);
  }
  return normaliseConfig(structure.output, sourcePath);
}

function tooLarge(sourcePath: string | undefined, size: number | undefined): ConfigError {
  const shown = size === undefined ? "more than 1 MiB" : `${size} bytes`;
  return new ConfigError(
    "CONFIG_TOO_LARGE",
    `${fileLabel(sourcePath)} is ${shown}; sandbox.yaml may be at most ${LIMITS.yamlMaxBytes} bytes (1 MiB)`,
    {
      hint: "move large content into setup scripts in the workspace",
      details: {
        ...(sourcePath === undefined ? {} : { sourcePath }),
        limitBytes: LIMITS.yamlMaxBytes,
        ...(size === undefined ? {} : { sizeBytes: size }),
      },
    },
  );
}

/**
 * Reads a sandbox.yaml file as text, within the size limit, without parsing it. Throws
 * `CONFIG_NOT_FOUND` when it does not exist, `CONFIG_TOO_LARGE` above 1 MiB (without reading
 * further), `CONFIG_READ_FAILED` when it cannot be read, `CONFIG_YAML_SYNTAX` when it is not UTF-8.
 * For callers that need the text too (e.g. to copy it verbatim); `loadConfig` is this plus parsing.
 */
export async function readConfigText(
  path: string,
  options: LoadConfigOptions = {},
): Promise<{ text: string; sourcePath: string }> {
  const { signal } = options;
  signal?.throwIfAborted();
  const absolute = resolve(path);
  let bytes: Buffer;
  try {
    const handle = await open(absolute, "r");
    try {
      const info = await handle.stat();
      if (info.size > LIMITS.yamlMaxBytes) throw tooLarge(absolute, info.size);
      // Read at most one byte past the limit, so a file that grows while we read is still refused.
      const buffer = Buffer.alloc(LIMITS.yamlMaxBytes + 1);
      let filled = 0;
      while (filled < buffer.length) {
        signal?.throwIfAborted();
        const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, null);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      if (filled > LIMITS.yamlMaxBytes) throw tooLarge(absolute, undefined);
      bytes = buffer.subarray(0, filled);
    } finally {
      await handle.close();
    }
  } catch (error) {
    if (signal?.aborted) throw signal.reason;
    if (error instanceof ConfigError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") {
      throw new ConfigError("CONFIG_NOT_FOUND", `no config file at ${absolute}`, {
        hint: "check the path, or create a sandbox.yaml there (the package README has an example)",
        cause: error,
        details: { sourcePath: absolute },
      });
    }
    throw new ConfigError("CONFIG_READ_FAILED", `could not read ${absolute} (${code ?? (error as Error).message})`, {
      hint: "make sure it is a readable file",
      cause: error,
      details: { sourcePath: absolute, ...(code ? { errno: code } : {}) },
    });
  }
  signal?.throwIfAborted();
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch (error) {
    throw new ConfigError("CONFIG_YAML_SYNTAX", `${absolute} is not UTF-8 text`, {
      hint: "save it as UTF-8 and try again",
      cause: error,
      issues: [{ path: "", message: "the file is not valid UTF-8 text" }],
      details: { sourcePath: absolute },
    });
  }
  return { text, sourcePath: absolute };
}

/**
 * Reads and parses a sandbox.yaml file: everything {@link readConfigText} and {@link parseConfig}
 * throw.
 */
export async function loadConfig(path: string, options: LoadConfigOptions = {}): Promise<SandboxConfig> {
  const { text, sourcePath } = await readConfigText(path, options);
  return parseConfig(text, { sourcePath });
}
