// `nx run workspace:lint`: fails on an import cycle inside a package (each of packages/* and e2e),
// type-only imports included, which import-x/no-cycle skips. Prints one circle per tangle.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import ts from "typescript";

/** Files that take part: TypeScript and JavaScript modules, not declarations. */
const SOURCE = /\.(ts|mts|cts|js|mjs|cjs)$/;
const SKIPPED_FILE = /\.d\.[mc]?ts$/;
const SKIPPED_DIR = new Set(["dist", "node_modules", "coverage", ".nx", ".work"]);
/** What an ESM `.js` specifier may name on disk (the sources are TypeScript). */
const ALIASES = { ".js": [".ts", ".js"], ".mjs": [".mts", ".mjs"], ".cjs": [".cts", ".cjs"] };

/** Every package directory: packages/* and e2e, relative to the current directory. */
function packageDirs() {
  const dirs = existsSync("packages")
    ? readdirSync("packages", { withFileTypes: true })
        .filter((entry) => entry.isDirectory())
        .map((entry) => join("packages", entry.name))
    : [];
  if (existsSync("e2e")) dirs.push("e2e");
  return dirs.filter((dir) => existsSync(join(dir, "package.json"))).sort();
}

function sourceFiles(dir) {
  const files = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!SKIPPED_DIR.has(entry.name)) files.push(...sourceFiles(path));
    } else if (SOURCE.test(entry.name) && !SKIPPED_FILE.test(entry.name)) files.push(path);
  }
  return files;
}

/** The module specifiers of a file: imports and re-exports (`type` ones too), `import()` in code and types. */
function specifiers(path) {
  const text = readFileSync(path, "utf8");
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, false);
  const found = [];
  const visit = (node) => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
      if (ts.isStringLiteral(node.moduleSpecifier)) found.push(node.moduleSpecifier.text);
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      const expression = node.moduleReference.expression;
      if (ts.isStringLiteral(expression)) found.push(expression.text);
    } else if (ts.isImportTypeNode(node)) {
      const literal = ts.isLiteralTypeNode(node.argument) ? node.argument.literal : undefined;
      if (literal && ts.isStringLiteral(literal)) found.push(literal.text);
    } else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(node.expression) && node.expression.text === "require")) &&
      node.arguments.length > 0 &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      found.push(node.arguments[0].text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The file a relative specifier names, among `files`; undefined for packages and unknown files. */
function resolveSpecifier(from, specifier, files) {
  if (!specifier.startsWith(".")) return undefined;
  const base = join(dirname(from), specifier);
  const extension = Object.keys(ALIASES).find((ext) => base.endsWith(ext));
  const candidates = extension
    ? ALIASES[extension].map((alias) => base.slice(0, -extension.length) + alias)
    : [base, `${base}.ts`, `${base}.js`, join(base, "index.ts"), join(base, "index.js")];
  return candidates.find((candidate) => files.has(candidate));
}

/** Tarjan's strongly connected components of `graph` (Map of node to Set of nodes). */
function components(graph) {
  let next = 0;
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const result = [];
  const connect = (node) => {
    index.set(node, next);
    low.set(node, next);
    next += 1;
    stack.push(node);
    onStack.add(node);
    for (const target of graph.get(node)) {
      if (!index.has(target)) {
        connect(target);
        low.set(node, Math.min(low.get(node), low.get(target)));
      } else if (onStack.has(target)) low.set(node, Math.min(low.get(node), index.get(target)));
    }
    if (low.get(node) !== index.get(node)) return;
    const component = [];
    let member;
    do {
      member = stack.pop();
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    result.push(component);
  };
  for (const node of [...graph.keys()].sort()) if (!index.has(node)) connect(node);
  return result;
}

/** One shortest circle through `start` inside `members`. */
function circle(graph, start, members) {
  const previous = new Map([[start, undefined]]);
  const queue = [start];
  while (queue.length > 0) {
    const node = queue.shift();
    for (const target of [...graph.get(node)].sort()) {
      if (!members.has(target)) continue;
      if (target === start) {
        const path = [node];
        while (previous.get(path[0]) !== undefined) path.unshift(previous.get(path[0]));
        return [...path, start];
      }
      if (!previous.has(target)) {
        previous.set(target, node);
        queue.push(target);
      }
    }
  }
  return [start, start];
}

let failed = false;
for (const dir of packageDirs()) {
  const files = new Set(sourceFiles(dir));
  const graph = new Map();
  for (const file of files) {
    const targets = new Set();
    for (const specifier of specifiers(file)) {
      const target = resolveSpecifier(file, specifier, files);
      if (target) targets.add(target);
    }
    graph.set(file, targets);
  }
  for (const component of components(graph)) {
    const selfLoop = component.length === 1 && graph.get(component[0]).has(component[0]);
    if (component.length < 2 && !selfLoop) continue;
    failed = true;
    const start = component.sort()[0];
    const path = circle(graph, start, new Set(component)).map((file) => relative(dir, file));
    const more = component.length > path.length - 1 ? ` (${component.length} files tangled)` : "";
    process.stdout.write(`${dir}: import cycle ${path.join(" -> ")}${more}\n`);
  }
}
process.exit(failed ? 1 : 0);
