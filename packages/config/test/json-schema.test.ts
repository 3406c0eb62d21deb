// The published sandbox.schema.json: equal to the schema in code, described for editors' hovers, and
// accepting and rejecting the same files as parseConfig (semantic rules left to parseConfig).
import { readFileSync } from "node:fs";
import { parse } from "yaml";
import { parseConfig, sandboxJsonSchema } from "../src/index.js";

type Schema = Record<string, unknown>;

/**
 * A minimal JSON Schema checker for exactly the keywords the generated schema uses (the test
 * fails on any other keyword, so a change in the generator cannot slip past it unchecked).
 */
const KNOWN = new Set([
  "$schema",
  "$id",
  "title",
  "description",
  "default",
  "type",
  "properties",
  "required",
  "additionalProperties",
  "propertyNames",
  "items",
  "anyOf",
  "const",
  "enum",
  "minimum",
  "maximum",
  "minItems",
  "maxItems",
  "uniqueItems",
  "maxProperties",
  "examples",
  "pattern",
]);

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function valid(schema: Schema, value: unknown): boolean {
  for (const key of Object.keys(schema)) if (!KNOWN.has(key)) throw new Error(`unsupported keyword ${key}`);
  if (schema.type !== undefined) {
    const actual = typeOf(value);
    if (!(actual === schema.type || (schema.type === "number" && actual === "integer"))) return false;
  }
  if ("const" in schema && schema.const !== value) return false;
  if (schema.enum && !(schema.enum as unknown[]).includes(value)) return false;
  if (schema.anyOf && !(schema.anyOf as Schema[]).some((option) => valid(option, value))) return false;
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) return false;
    if (typeof schema.maximum === "number" && value > schema.maximum) return false;
  }
  if (typeof value === "string" && typeof schema.pattern === "string" && !new RegExp(schema.pattern, "u").test(value)) {
    return false;
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems) return false;
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems) return false;
    if (schema.uniqueItems === true && new Set(value.map((item) => JSON.stringify(item))).size !== value.length) {
      return false;
    }
    if (schema.items && !value.every((item) => valid(schema.items as Schema, item))) return false;
  }
  if (typeOf(value) === "object") {
    const record = value as Record<string, unknown>;
    if (typeof schema.maxProperties === "number" && Object.keys(record).length > schema.maxProperties) return false;
    const properties = (schema.properties ?? {}) as Record<string, Schema>;
    for (const name of (schema.required ?? []) as string[]) if (!(name in record)) return false;
    for (const [name, item] of Object.entries(record)) {
      if (schema.propertyNames && !valid(schema.propertyNames as Schema, name)) return false;
      if (name in properties) {
        if (!valid(properties[name]!, item)) return false;
      } else if (schema.additionalProperties === false) return false;
      else if (typeof schema.additionalProperties === "object" && !valid(schema.additionalProperties as Schema, item)) {
        return false;
      }
    }
  }
  return true;
}

function parses(text: string): boolean {
  try {
    parseConfig(text);
    return true;
  } catch {
    return false;
  }
}

const service = (lines: string) =>
  `version: 1\nservices:\n  web:\n    command: run\n${lines
    .split("\n")
    .filter(Boolean)
    .map((line) => `    ${line}`)
    .join("\n")}\n`;

const ACCEPTED = [
  "version: 1\n",
  "version: 1\nprofile: xlarge\nresources: { cpus: 3 }\ndiskGiB: 2\nworkspace: /w\nimage: ./img\nsetup: [a]\nresume: []\n",
  "version: 1\nnetwork: { allowedHosts: [a.com, '*.b.org'] }\n",
  "version: 1\nnetwork: { hostPorts: [1, 8000, 65535] }\n",
  "version: 1\nnetwork: { allowedHosts: [api.github.com], secrets: { GH: { from: 'env:GH', hosts: [api.github.com] } } }\n",
  "version: 1\nnetwork: { allowedHosts: [a.com], secrets: { A: { from: 'env:A', hosts: [a.com], placeholderPrefix: sk-ant-oat01- } } }\n",
  "version: 1\nnetwork: { allowedHosts: [a.com], secrets: { A: { from: 'file:./a', hosts: [a.com], placeholderFrom: 'file:./a.placeholder' } } }\n",
  "version: 1\nmounts: [{ host: ./docs, guest: /mnt/docs }]\n",
  `version: 1\nnetwork: { hostPorts: [${Array.from({ length: 16 }, (_, i) => 9000 + i).join(", ")}] }\n`,
  service("port: 8080\nenv: { A: x, _B: '' }\nhealth: /\ntimeoutMs: 1\npreview: true\nplatforms: [linux]"),
  service("preview: { url: 'https://x.dev/a', title: T, description: D }"),
  service("previews:\n  - { url: /a, title: A }\n  - { folder: F, links: [{ url: /b, title: B }] }"),
  service("cwd: app/src\nhealth: process"),
];

/** Structural mistakes: both the JSON Schema and parseConfig must refuse them. */
const REJECTED = [
  "profile: small\n",
  "version: 2\n",
  "version: 1\nextra: 1\n",
  "version: 1\nprofile: huge\n",
  "version: 1\nresources: { cpus: 0 }\n",
  "version: 1\nresources: { gpus: 1 }\n",
  "version: 1\ndiskGiB: 1\n",
  "version: 1\ndiskGiB: 2.5\n",
  "version: 1\nworkspace: rel\n",
  "version: 1\nimage: ''\n",
  "version: 1\nsetup: make\n",
  "version: 1\nresume: [1]\n",
  "version: 1\nnetwork: { allowedHosts: ['*'] }\n",
  "version: 1\nnetwork: { hosts: [] }\n",
  "version: 1\nnetwork: { hostPorts: 8000 }\n",
  "version: 1\nnetwork: { secrets: { GH: ghp_inline } }\n",
  "version: 1\nnetwork: { secrets: { GH: { from: ghp_inline, hosts: [a.com] } } }\n",
  "version: 1\nnetwork: { secrets: { GH: { from: 'env:GH', hosts: [] } } }\n",
  "version: 1\nnetwork: { secrets: { GH: { from: 'env:GH', hosts: [a.com], value: x } } }\n",
  "version: 1\nnetwork: { secrets: { 1GH: { from: 'env:GH', hosts: [a.com] } } }\n",
  "version: 1\nnetwork: { allowedHosts: [a.com], secrets: { A: { from: 'env:A', hosts: [a.com], placeholderPrefix: 'a b' } } }\n",
  "version: 1\nnetwork: { allowedHosts: [a.com], secrets: { A: { from: 'env:A', hosts: [a.com], placeholderFrom: 'env:P' } } }\n",
  "version: 1\nmounts: [{ host: ./docs, guest: docs }]\n",
  "version: 1\nmounts: [{ host: ./docs }]\n",
  "version: 1\nnetwork: { hostPorts: [0] }\n",
  "version: 1\nnetwork: { hostPorts: [65536] }\n",
  "version: 1\nnetwork: { hostPorts: [80.5] }\n",
  "version: 1\nnetwork: { hostPorts: ['8000'] }\n",
  "version: 1\nnetwork: { hostPorts: [8000, 8000] }\n",
  `version: 1\nnetwork: { hostPorts: [${Array.from({ length: 17 }, (_, i) => 9000 + i).join(", ")}] }\n`,
  "version: 1\nservices: { Web: { command: x } }\n",
  "version: 1\nservices: { web: { port: 80 } }\n",
  service("comand: x"),
  service("review: true"),
  service("command2: x"),
  service("port: 70000"),
  service("port: 0"),
  service("port: 80.5"),
  service("cwd: /abs"),
  service("env: { 1A: x }"),
  service("env: { A: 1 }"),
  service("health: tcp"),
  service("timeoutMs: 0"),
  service("preview: false"),
  service("preview: { url: docs }"),
  service("preview: { port: 1 }"),
  service("previews: [{ url: /a }]"),
  service("previews: [{ folder: F, links: [] }]"),
  service("previews: [{ url: '//host', title: T }]"),
  service("platforms: []"),
  service("platforms: [windows]"),
];

/** Rules JSON Schema cannot express: only parseConfig refuses these (documented in the README). */
const ONLY_PARSECONFIG_REJECTS = [
  service("env: { PORT: '1' }"),
  service("env: { PUBLIC_URL: x }"),
  service("env: { AMP_THREAD_ID: x }"),
  "version: 1\nnetwork: { secrets: { PATH: { from: 'env:X', hosts: [a.com] } }, allowedHosts: [a.com] }\n",
  "version: 1\nnetwork: { secrets: { GH: { from: 'env:GH', hosts: [b.com] } }, allowedHosts: [a.com] }\n",
  "version: 1\nmounts: [{ host: ./a, guest: /etc/x }]\n",
  "version: 1\nmounts: [{ host: ./a, guest: /mnt/../etc }]\n",
  "version: 1\nmounts: [{ host: ./a, guest: /workspace }]\n",
  "version: 1\nmounts: [{ host: ./a, guest: /mnt/a }, { host: ./b, guest: /mnt/a/b }]\n",
  service("preview: { title: $AMP_USER_EMAIL }"),
  service("cwd: ../up"),
  "version: 1\nworkspace: /a/../b\n",
  "version: 1\nservices:\n  a: { command: x, port: 80 }\n  b: { command: y, port: 80 }\n",
  service("env: { A: '${services.nope.publicURL}' }"),
  service(
    "previews:\n  - { folder: F, links: [{ url: /a, title: A }] }\n  - { folder: F, links: [{ url: /a, title: A }] }",
  ),
];

describe("sandboxJsonSchema", () => {
  const schema = sandboxJsonSchema();

  test("the committed sandbox.schema.json equals the schema in code (run the build to refresh it)", () => {
    const committed: unknown = JSON.parse(readFileSync(new URL("../sandbox.schema.json", import.meta.url), "utf8"));
    expect(committed).toEqual(schema);
  });

  test("is a draft-07 schema titled for sandbox.yaml, with the URL it is published at", () => {
    expect(schema).toMatchObject({
      $schema: "http://json-schema.org/draft-07/schema#",
      $id: "https://unpkg.com/@pi-sandbox/config/sandbox.schema.json",
      title: "sandbox.yaml",
      type: "object",
    });
  });

  test("every property has a description (editors show it on hover)", () => {
    const undescribed: string[] = [];
    const walk = (node: unknown, path: string): void => {
      if (Array.isArray(node)) return node.forEach((child, i) => walk(child, `${path}[${i}]`));
      if (typeof node !== "object" || node === null) return;
      const properties = (node as { properties?: Record<string, Schema> }).properties ?? {};
      for (const [key, child] of Object.entries(properties)) {
        if (typeof child.description !== "string" || child.description === "") undescribed.push(`${path}.${key}`);
      }
      for (const [key, child] of Object.entries(node)) walk(child, key === "properties" ? path : `${path}/${key}`);
    };
    walk(schema, "");
    expect(undescribed).toEqual([]);
  });

  test.each(ACCEPTED)("accepts what parseConfig accepts: %s", (text) => {
    expect(parses(text)).toBe(true);
    expect(valid(schema, parse(text))).toBe(true);
  });

  test.each(REJECTED)("rejects what parseConfig rejects: %s", (text) => {
    expect(parses(text)).toBe(false);
    expect(valid(schema, parse(text))).toBe(false);
  });

  test.each(ONLY_PARSECONFIG_REJECTS)("leaves semantic rules to parseConfig: %s", (text) => {
    expect(parses(text)).toBe(false);
    expect(valid(schema, parse(text))).toBe(true);
  });
});
