// Random mutations of valid sandbox.yaml files: parseConfig either returns plain data or throws a
// ConfigError whose issues are located, never anything else. FUZZ_SEED replays a failing run.
import fc from "fast-check";
import { parse, stringify } from "yaml";
import { isConfigError, parseConfig, type SandboxConfig } from "../src/index.js";

const VALID = [
  "version: 1\n",
  `version: 1
profile: medium
resources: { cpus: 3 }
diskGiB: 20
setup: [make]
network:
  allowedHosts: [registry.npmjs.org, "*.github.com"]
services:
  web:
    command: npm start
    port: 3000
    health: /
    preview: true
    env: { API: "\${services.api.publicURL}/v1" }
  api:
    command: npm run api
    cwd: server
    preview: { url: /docs, title: API }
    previews:
      - { url: /a, title: A }
      - folder: More
        links: [{ url: "https://example.com", title: Site, description: d }]
    platforms: [linux]
`,
];

type Segment = string | number;

/** Every path to a node of a JSON-like value, the root included. */
function paths(value: unknown, prefix: Segment[] = []): Segment[][] {
  const found: Segment[][] = [prefix];
  if (Array.isArray(value)) value.forEach((item, index) => found.push(...paths(item, [...prefix, index])));
  else if (value && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) found.push(...paths(item, [...prefix, key]));
  }
  return found;
}

function setAt(root: unknown, path: Segment[], replace: (old: unknown) => unknown | typeof DELETE): unknown {
  if (path.length === 0) {
    const next = replace(root);
    return next === DELETE ? null : next;
  }
  const copy: unknown = structuredClone(root);
  let parent = copy as Record<string, unknown>;
  for (const segment of path.slice(0, -1)) parent = parent[segment as string] as Record<string, unknown>;
  const last = path.at(-1)!;
  const next = replace(parent[last as string]);
  if (next === DELETE) {
    if (Array.isArray(parent)) parent.splice(last as number, 1);
    else delete parent[last as string];
  } else parent[last as string] = next;
  return copy;
}

const DELETE = Symbol("delete");

const yamlishChar = fc.constantFrom(..."abcAZ09 :-[]{},&*!|>'\"#%@`?\n\t$/._");

/** Edits of the raw text: delete, insert, duplicate a line, re-indent a line. */
const textMutation = fc
  .tuple(
    fc.constantFrom(...VALID),
    fc.nat(),
    fc.nat({ max: 12 }),
    fc.string({ unit: yamlishChar, maxLength: 8 }),
    fc.nat(3),
  )
  .map(([text, at, length, insert, kind]) => {
    const position = at % (text.length + 1);
    const lines = text.split("\n");
    const line = at % lines.length;
    switch (kind) {
      case 0:
        return text.slice(0, position) + text.slice(position + length);
      case 1:
        return text.slice(0, position) + insert + text.slice(position);
      case 2:
        return [...lines.slice(0, line + 1), ...lines.slice(line)].join("\n");
      default:
        return [
          ...lines.slice(0, line),
          " ".repeat(length % 5) + lines[line]!.trimStart(),
          ...lines.slice(line + 1),
        ].join("\n");
    }
  });

/** Edits of the parsed value: replace a node with any JSON value, delete it, or add a key. */
const valueMutation = fc
  .tuple(fc.constantFrom(...VALID), fc.nat(), fc.jsonValue({ maxDepth: 3 }), fc.string({ maxLength: 10 }), fc.nat(2))
  .map(([text, pick, value, key, kind]) => {
    const root: unknown = parse(text);
    const all = paths(root);
    const path = all[pick % all.length]!;
    const mutated = setAt(root, path, (old) => {
      if (kind === 0) return value;
      if (kind === 1) return DELETE;
      return old && typeof old === "object" && !Array.isArray(old) ? { ...old, [key]: value } : value;
    });
    return stringify(mutated);
  });

function check(text: string): void {
  let config: SandboxConfig;
  try {
    config = parseConfig(text);
  } catch (error) {
    if (!isConfigError(error)) throw error; // anything else is a crash
    expect(error.issues.length).toBeGreaterThan(0);
    expect(error.message.split("\n")).toHaveLength(error.issues.length + 1);
    for (const issue of error.issues) {
      const rootShape = issue.message.startsWith("the file must be a YAML mapping");
      expect(issue.path !== "" || error.code === "CONFIG_YAML_SYNTAX" || rootShape).toBe(true);
      if (error.code === "CONFIG_INVALID") {
        expect(issue.line).toBeGreaterThanOrEqual(1);
        expect(issue.column).toBeGreaterThanOrEqual(1);
      }
    }
    return;
  }
  // Success is plain, serialisable data.
  expect(JSON.parse(JSON.stringify(config))).toEqual(config);
}

test("the fixtures are valid", () => {
  for (const text of VALID) expect(() => parseConfig(text)).not.toThrow();
});

test("1,000 random mutations of valid files never crash parseConfig", () => {
  fc.assert(
    fc.property(fc.oneof(textMutation, valueMutation), (text) => check(text)),
    { numRuns: 1000, seed: Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31) },
  );
});
