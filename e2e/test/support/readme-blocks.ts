// The fenced code blocks of this repository's READMEs, as tests read them: the release test runs
// their `pi-sandbox` command lines from the installed tarballs, readme-types.test.ts compiles
// their js/ts blocks. A block's hidden preamble is the `<!-- ts: … -->` comment just above it.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";

/** The repository root. */
export const ROOT = resolve(import.meta.dirname, "..", "..", "..");

/** One fenced block of a README. */
export interface CodeBlock {
  /** README path relative to the repository root. */
  file: string;
  /** 1-based line of the block's first code line. */
  line: number;
  /** The fence's info string: `sh`, `ts`, … (empty when none). */
  lang: string;
  /** The nearest `## ` heading above the block. */
  section: string;
  /** The block's lines, without the fences. */
  lines: string[];
  /** Text of a `<!-- ts: … -->` comment right before the block (declarations it uses). */
  preamble?: string;
  /** True when that comment was `<!-- ts-function: … -->`: the block is a function body. */
  functionBody: boolean;
}

/** Every README: the root's, each package's and e2e's, relative to the root. */
export function readmeFiles(): string[] {
  const packages = readdirSync(join(ROOT, "packages"))
    .map((dir) => join("packages", dir, "README.md"))
    .filter((file) => existsSync(join(ROOT, file)));
  return ["README.md", ...packages.sort(), join("e2e", "README.md")];
}

/** The fenced blocks of every README whose info string is one of `langs`. */
export function codeBlocks(langs: string[]): CodeBlock[] {
  const blocks: CodeBlock[] = [];
  for (const file of readmeFiles()) {
    const lines = readFileSync(join(ROOT, file), "utf8").split("\n");
    let section = "";
    for (let i = 0; i < lines.length; i += 1) {
      const heading = /^#{1,6} (.*)$/.exec(lines[i]!);
      if (heading) section = heading[1]!;
      const fence = /^(```+|~~~+)\s*(\S*)/.exec(lines[i]!);
      if (!fence) continue;
      const end = lines.findIndex((l, j) => j > i && l.startsWith(fence[1]!));
      const close = end === -1 ? lines.length : end;
      if (langs.includes(fence[2]!)) {
        const comment = preambleBefore(lines, i);
        blocks.push({
          file,
          line: i + 2,
          lang: fence[2]!,
          section,
          lines: lines.slice(i + 1, close),
          ...(comment ? { preamble: comment.text } : {}),
          functionBody: comment?.functionBody ?? false,
        });
      }
      i = close;
    }
  }
  return blocks;
}

/** The `<!-- ts: … -->` or `<!-- ts-function: … -->` comment just above `fence` (blank lines between). */
function preambleBefore(lines: string[], fence: number): { text: string; functionBody: boolean } | undefined {
  let end = fence - 1;
  while (end > 0 && lines[end]!.trim() === "") end -= 1; // Prettier puts a blank line in between
  if (end < 0 || !lines[end]!.trimEnd().endsWith("-->")) return undefined;
  let start = end;
  while (start > 0 && !lines[start]!.includes("<!--")) start -= 1;
  const comment = /<!--\s*ts(-function)?:([\s\S]*?)-->/.exec(lines.slice(start, end + 1).join("\n"));
  return comment ? { text: comment[2]!.trim(), functionBody: comment[1] !== undefined } : undefined;
}

/** One command line of a shell block: continuations joined, comment-only and blank lines left out. */
export interface CommandLine {
  /** Where it is, `README.md:72`. */
  where: string;
  /** The line as written (a trailing `# comment` included; the shell ignores it). */
  text: string;
  /** The block it came from. */
  block: CodeBlock;
}

/** The command lines of a shell block. */
export function commandLines(block: CodeBlock): CommandLine[] {
  const out: CommandLine[] = [];
  for (let i = 0; i < block.lines.length; i += 1) {
    const first = i;
    let text = block.lines[i]!;
    while (text.endsWith("\\") && i + 1 < block.lines.length) text = `${text.slice(0, -1)} ${block.lines[++i]!.trim()}`;
    if (text.trim() === "" || text.trim().startsWith("#")) continue;
    out.push({ where: `${block.file}:${block.line + first}`, text: text.trim(), block });
  }
  return out;
}
