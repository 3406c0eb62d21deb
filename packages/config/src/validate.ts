// Structural validation: runs the valibot schema over the parsed YAML value and turns its issues
// into located, human sentences. Two gaps of valibot are filled here: `strictObject` reports only
// the first unknown key of an object (we walk the value and report them all), and a failed union
// of two mappings reports both branches (we re-check only the branch the user meant).
import * as v from "valibot";
import { describeValue, dottedPath, isPlainRecord, quotePath } from "./describe.js";
import { INLINE_SECRET_HINT, sandboxConfigSchema, serviceSchema, type SandboxConfigInput } from "./schema.js";

/** A path segment: a mapping key or a list index. */
export type Segment = string | number;

/** An issue before it is given a line and column. */
export interface LocatedIssue {
  /** Path segments from the document root. */
  segments: Segment[];
  /** Whether the position is the key of the last segment or its value. */
  at: "key" | "value";
  /** The full sentence. */
  message: string;
}

/** Result of structural validation. */
export interface StructureResult {
  /** The typed, partly defaulted value; set only when there are no issues. */
  output?: SandboxConfigInput;
  /** Every structural problem. */
  issues: LocatedIssue[];
}

// A loose view of valibot schema objects, enough to walk them alongside a value.
interface SchemaNode {
  type: string;
  wrapped?: SchemaNode;
  entries?: Record<string, SchemaNode>;
  item?: SchemaNode;
  value?: SchemaNode;
  options?: SchemaNode[];
}

const WRAPPERS = new Set(["optional", "nullable", "nullish", "exact_optional", "undefinedable"]);

function unwrap(schema: SchemaNode): SchemaNode {
  let current = schema;
  while (WRAPPERS.has(current.type) && current.wrapped) current = current.wrapped;
  return current;
}

/** The mapping branch of a union that an object input was meant for: the one sharing most keys. */
function branchFor(union: SchemaNode, input: unknown): SchemaNode | undefined {
  if (!isPlainRecord(input)) return undefined;
  let best: SchemaNode | undefined;
  let bestScore = -1;
  for (const option of union.options ?? []) {
    const candidate = unwrap(option);
    if (candidate.type !== "strict_object" || !candidate.entries) continue;
    const entries = candidate.entries;
    const score = Object.keys(input).filter((key) => Object.hasOwn(entries, key)).length;
    if (score > bestScore) {
      best = candidate;
      bestScore = score;
    }
  }
  return best;
}

/** The schema that applies at `segments`, walking the value alongside to pick union branches. */
function schemaAt(root: SchemaNode, rootValue: unknown, segments: readonly Segment[]): SchemaNode | undefined {
  let schema: SchemaNode | undefined = unwrap(root);
  let value = rootValue;
  for (const segment of segments) {
    if (!schema) return undefined;
    if (schema.type === "union") schema = branchFor(schema, value);
    if (!schema) return undefined;
    if (schema.type === "strict_object" && isPlainRecord(value)) schema = schema.entries?.[String(segment)];
    else if (schema.type === "record" && isPlainRecord(value)) schema = schema.value;
    else if (schema.type === "array" && Array.isArray(value)) schema = schema.item;
    else return undefined;
    value = (value as Record<string, unknown>)[String(segment)];
    schema = schema ? unwrap(schema) : undefined;
  }
  return schema;
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j]!;
      row[j] = Math.min(above + 1, row[j - 1]! + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length]!;
}

/** True for `network.secrets.NAME` and below: text there may be a credential and is never quoted. */
function inSecret(segments: readonly Segment[]): boolean {
  return segments.length >= 3 && segments[0] === "network" && segments[1] === "secrets";
}

/** The message for a secret written by value (a string, or a mapping with a value-like key). */
function inlineSecretMessage(segments: readonly Segment[]): string {
  return `${quotePath(dottedPath(segments.slice(0, 3)))} must be a mapping {from, hosts}; ${INLINE_SECRET_HINT}`;
}

function unknownKeyMessage(segments: Segment[], key: string, allowed: string[], inService: boolean): string {
  const path = quotePath(dottedPath(segments));
  if (inSecret(segments) && segments.length === 4 && /^(value|token|key|secret|password)$/i.test(key)) {
    return `${path}: ${INLINE_SECRET_HINT}`;
  }
  if (inService && key === "review") {
    return `${path} is an Amp review-widget setting that does not exist in a local sandbox; remove it`;
  }
  const near = allowed.find((name) => name.toLowerCase() === key.toLowerCase() || editDistance(name, key) <= 2);
  if (near) return `${path} is not a known key; did you mean \`${near}\`?`;
  const where = segments.length === 1 ? "at the top level" : "here";
  return `${path} is not a known key; the keys allowed ${where} are ${allowed.join(", ")}`;
}

/** What walking the value alongside the schema found. */
interface WalkFindings {
  /** Unknown keys, and lists or binary data where a mapping belongs. */
  issues: LocatedIssue[];
  /** Paths already explained (a list where a mapping belongs, a nested folder); valibot's issues under them are noise. */
  notMappings: Segment[][];
}

function mappingMismatch(segments: Segment[], value: unknown, node: SchemaNode): LocatedIssue {
  if (inSecret(segments)) return { segments, at: "value", message: inlineSecretMessage(segments) };
  const path = quotePath(dottedPath(segments));
  const got = describeValue(value);
  if (segments.length === 0) {
    return {
      segments,
      at: "value",
      message: `the file must be a YAML mapping with keys such as version and services; got ${got}`,
    };
  }
  const what =
    node.type === "record" && segments.length === 1
      ? "a mapping of service names to services"
      : "a mapping of keys and values";
  return { segments, at: "value", message: `${path} must be ${what}; got ${got}` };
}

/**
 * Walks the value alongside the schema: reports every key that a strict schema does not list
 * (valibot stops at the first per mapping) and every list where a mapping belongs (valibot
 * accepts arrays as objects).
 */
function walk(schema: SchemaNode, value: unknown, segments: Segment[], found: WalkFindings): void {
  let node = unwrap(schema);
  if (node.type === "union") {
    const branch = branchFor(node, value);
    if (!branch) return;
    node = branch;
  }
  if (
    (node.type === "strict_object" || node.type === "record") &&
    typeof value === "object" &&
    value !== null &&
    !isPlainRecord(value)
  ) {
    found.issues.push(mappingMismatch(segments, value, node));
    found.notMappings.push(segments);
    return;
  }
  if (inFolder(segments) && isPlainRecord(value) && ("folder" in value || "links" in value)) {
    const path = quotePath(dottedPath(segments));
    found.issues.push({
      segments,
      at: "value",
      message: `${path} is a folder inside a folder; folders are one level deep, so list {url, title} links here`,
    });
    found.notMappings.push(segments);
    return;
  }
  if (node.type === "strict_object" && node.entries && isPlainRecord(value)) {
    const allowed = Object.keys(node.entries);
    for (const [key, child] of Object.entries(value)) {
      const childSegments = [...segments, key];
      const entry = node.entries[key];
      if (entry && Object.hasOwn(node.entries, key)) walk(entry, child, childSegments, found);
      else {
        const inService = node === (serviceSchema as unknown as SchemaNode);
        found.issues.push({
          segments: childSegments,
          at: "key",
          message: unknownKeyMessage(childSegments, key, allowed, inService),
        });
      }
    }
  } else if (node.type === "record" && node.value && isPlainRecord(value)) {
    for (const [key, child] of Object.entries(value)) walk(node.value, child, [...segments, key], found);
  } else if (node.type === "array" && node.item && Array.isArray(value)) {
    value.forEach((child, index) => walk(node.item!, child, [...segments, index], found));
  }
}

/** True for `services.X.previews.N.links.M`: a link inside a folder. */
function inFolder(segments: readonly Segment[]): boolean {
  return segments.length === 6 && segments[2] === "previews" && segments[4] === "links";
}

function isWithin(segments: readonly Segment[], prefix: readonly Segment[]): boolean {
  return (
    prefix.length <= segments.length && prefix.every((segment, index) => String(segment) === String(segments[index]))
  );
}

const REQUIRED_HINTS: Record<string, string> = {
  version: "add `version: 1` at the top of the file",
  command: "give the foreground shell command that runs the service",
  url: "give an app path like /docs or an http(s):// URL",
  title: "give the link a title",
  folder: "give the folder a name",
  links: "list the folder's links",
};

function mapIssue(issue: v.BaseIssue<unknown>, prefix: Segment[], rootValue: unknown, out: LocatedIssue[]): void {
  const pathItems = (issue.path ?? []) as { key: unknown; origin?: string }[];
  const segments: Segment[] = [...prefix, ...pathItems.map((item) => item.key as Segment)];
  const last = pathItems.at(-1);
  const at = last?.origin === "key" ? "key" : "value";
  const path = quotePath(dottedPath(segments));

  if (issue.type === "strict_object") {
    if (issue.expected === "never") return; // reported, with every sibling, by walk()
    if (last?.origin === "key") {
      const key = String(segments.at(-1));
      const hint = REQUIRED_HINTS[key];
      out.push({ segments, at, message: `${path} is required${hint ? `; ${hint}` : ""}` });
      return;
    }
    if (inSecret(segments)) {
      out.push({ segments, at, message: inlineSecretMessage(segments) });
      return;
    }
    if (segments.length === 0) {
      out.push({
        segments,
        at,
        message: `the file must be a YAML mapping with keys such as version and services; got ${describeValue(issue.input)}`,
      });
      return;
    }
    out.push({
      segments,
      at,
      message: `${path} must be a mapping of keys and values; got ${describeValue(issue.input)}`,
    });
    return;
  }

  if (issue.type === "union" && isPlainRecord(issue.input)) {
    const union = schemaAt(sandboxConfigSchema as unknown as SchemaNode, rootValue, segments);
    const branch = union ? branchFor(union, issue.input) : undefined;
    if (branch) {
      const rerun = v.safeParse(branch as unknown as v.GenericSchema, issue.input, { abortEarly: false });
      for (const inner of rerun.issues ?? []) mapIssue(inner, segments, rootValue, out);
      return;
    }
  }

  out.push({ segments, at, message: `${path} ${issue.message}` });
}

/** Validates the parsed YAML value against the structural schema and reports every problem. */
export function validateStructure(value: unknown): StructureResult {
  const result = v.safeParse(sandboxConfigSchema, value, { abortEarly: false });
  const found: WalkFindings = { issues: [], notMappings: [] };
  walk(sandboxConfigSchema as unknown as SchemaNode, value, [], found);
  const mapped: LocatedIssue[] = [];
  for (const issue of result.issues ?? []) mapIssue(issue, [], value, mapped);
  const issues = [
    ...found.issues,
    ...mapped.filter((issue) => !found.notMappings.some((prefix) => isWithin(issue.segments, prefix))),
  ];
  if (result.success && issues.length === 0) return { output: result.output, issues };
  return { issues };
}
