// Every ```js and ```ts block of every README compiles against the workspace packages' types
// (their sources, through the "@pi-sandbox/source" condition), each as its own TypeScript module
// under the workspace's strict options (a js block is held to what TypeScript infers for it). Free
// names a block uses are declared in a hidden `<!-- ts: … -->` comment right before it (e2e/README.md).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";
import { codeBlocks, ROOT, type CodeBlock } from "./support/readme-blocks.js";

const blocks = codeBlocks(["js", "ts"]);

/** The module a block compiles as, and how many lines come before the block's first line. */
function moduleText(block: CodeBlock): { text: string; offset: number } {
  const head = block.preamble ? block.preamble.split("\n") : [];
  const body = block.functionBody
    ? ["export async function snippet() {", ...block.lines, "}"]
    : [...block.lines, "export {};"];
  return { text: [...head, ...body].join("\n"), offset: head.length + (block.functionBody ? 1 : 0) };
}

/** Compiles every block in one program; returns each error as `README.md:12: message`. */
function compile(): string[] {
  const base = ts.parseJsonConfigFileContent(
    ts.readConfigFile(join(ROOT, "tsconfig.base.json"), (p) => readFileSync(p, "utf8")).config,
    ts.sys,
    ROOT,
  ).options;
  const options: ts.CompilerOptions = { ...base, noEmit: true, declaration: false, declarationMap: false };
  // Virtual files inside e2e/, so the workspace's node_modules and e2e's "type": "module" apply.
  const files = new Map(
    blocks.map((block, i) => {
      const name = join(ROOT, "e2e", "readme-blocks", `block-${i}.ts`);
      return [name, { block, ...moduleText(block) }] as const;
    }),
  );
  const host = ts.createCompilerHost(options);
  const { fileExists, readFile, getSourceFile } = host;
  host.fileExists = (f) => files.has(f) || fileExists.call(host, f);
  host.readFile = (f) => files.get(f)?.text ?? readFile.call(host, f);
  host.getSourceFile = (f, language, ...rest) => {
    const file = files.get(f);
    return file ? ts.createSourceFile(f, file.text, language) : getSourceFile.call(host, f, language, ...rest);
  };
  const program = ts.createProgram([...files.keys()], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    const file = d.file && files.get(d.file.fileName);
    if (!file || d.start === undefined) return `${d.file?.fileName ?? "(options)"}: ${message}`;
    const line = d.file!.getLineAndCharacterOfPosition(d.start).line - file.offset;
    return `${file.block.file}:${file.block.line + line}: ${message}`;
  });
}

test("the READMEs hold js and ts blocks to check, in the root README and the libraries'", () => {
  const files = new Set(blocks.map((b) => b.file));
  for (const file of ["README.md", "packages/config/README.md", "packages/vm/README.md"])
    expect({ file, present: files.has(file) }).toEqual({ file, present: true });
});

test("every js and ts block of every README compiles against the packages' types", () => {
  expect(compile()).toEqual([]);
}, 120_000);
