// What loading `@pi-sandbox/controller/client` loads: no supervisor, no ingress, no Gondolin and
// no daemon module, so Pi and scripts get a thin client (ARCHITECTURE.md "Layers"); `.` is that client.
import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const packagesDir = resolve(packageDir, "..");

/** The specifiers a module loads as it is loaded: `import type` and `export type` are erased, the rest stay (verbatimModuleSyntax). */
function runtimeSpecifiers(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && !node.importClause?.isTypeOnly && ts.isStringLiteral(node.moduleSpecifier)) {
      found.push(node.moduleSpecifier.text);
    } else if (
      ts.isExportDeclaration(node) &&
      !node.isTypeOnly &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      found.push(node.moduleSpecifier.text);
    }
  };
  // Top-level statements only: an `import()` inside a function loads when called (doctor's image
  // check loads Gondolin so), not when the client is loaded.
  source.statements.forEach(visit);
  return found;
}

/** A workspace package's source file for `@pi-sandbox/<name>[/<sub>]`, through its "@pi-sandbox/source" export. */
function workspaceSource(specifier: string): string {
  const [, name, ...sub] = specifier.split("/");
  const dir = join(packagesDir, name!);
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
    exports: Record<string, { "@pi-sandbox/source": string }>;
  };
  const entry = manifest.exports[sub.length === 0 ? "." : `./${sub.join("/")}`];
  if (!entry) throw new Error(`${specifier} is not exported`);
  return join(dir, entry["@pi-sandbox/source"]);
}

/** Every workspace file and outside package that loading `entry` loads, as paths from packages/ and package names. */
function closure(entry: string): Set<string> {
  const seen = new Set<string>();
  const files = [entry];
  for (let file = files.pop(); file !== undefined; file = files.pop()) {
    const key = relative(packagesDir, file);
    if (seen.has(key)) continue;
    seen.add(key);
    for (const specifier of runtimeSpecifiers(file)) {
      if (specifier.startsWith(".")) files.push(resolve(dirname(file), specifier).replace(/\.js$/, ".ts"));
      else if (specifier.startsWith("@pi-sandbox/")) files.push(workspaceSource(specifier));
      else if (!specifier.startsWith("node:")) seen.add(specifier);
    }
  }
  return seen;
}

test("loading the client loads neither the supervisor, ingress, Gondolin nor any daemon module", () => {
  const loaded = [...closure(join(packageDir, "src/client/index.ts"))];
  expect(loaded).toContain("controller/src/client/index.ts");
  const daemonOnly = loaded.filter(
    (path) =>
      path.startsWith("controller/src/daemon/") ||
      path.startsWith("supervisor/") ||
      path.startsWith("ingress/") ||
      path.startsWith("@earendil-works/gondolin") ||
      path === "vm/src/index.ts",
  );
  expect(daemonOnly).toEqual([]);
});

test("the package root is the client, name for name", async () => {
  const root = await import("../src/index.js");
  const client = await import("../src/client/index.js");
  expect(Object.keys(root).sort()).toEqual(Object.keys(client).sort());
});
