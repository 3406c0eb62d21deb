// POSIX shell words: quoting the argv of `pi-sandbox exec … -- cmd args` into one command line for
// the guest's login shell, and splitting the ssh command that `shell` returns back into an argv.
import { shellQuote } from "@pi-sandbox/config";

/** Words the shell reads as syntax in a command's place (bash's list); quoted, they are a command name again. */
const RESERVED = new Set(
  "! case coproc do done elif else esac fi for function if in select then time until while [[ ]] { }".split(" "),
);

/**
 * The command line of an argv: one word is already a shell command line (`exec demo -- 'ls | wc'`)
 * and passes as it is; several are quoted word by word, so each reaches the program as one argument.
 */
export function commandLine(argv: readonly string[]): string {
  if (argv.length === 1) return argv[0]!;
  // In the first place `A=b` would be an assignment and `if` a keyword; docker would run a program
  // of that name, so they are quoted.
  const [program, ...args] = argv as [string, ...string[]];
  const quoted = shellQuote(program);
  const first = quoted === program && (program.includes("=") || RESERVED.has(program)) ? `'${program}'` : quoted;
  return [first, ...args.map(shellQuote)].join(" ");
}

/**
 * Splits a command line into words the way a POSIX shell does for quotes and backslashes (no
 * expansions, no operators); undefined when a quote is left open. Used on the `ssh …` line that
 * the vm package builds with `shellQuote`'s rules (`@pi-sandbox/config`).
 */
export function splitShellWords(text: string): string[] | undefined {
  const words: string[] = [];
  let word: string | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === " " || c === "\t" || c === "\n") {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1);
      if (end === -1) return undefined;
      word = (word ?? "") + text.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      let value = "";
      for (i++; i < text.length && text[i] !== '"'; i++) {
        if (text[i] === "\\" && i + 1 < text.length && '$`"\\\n'.includes(text[i + 1]!)) i++;
        value += text[i];
      }
      if (i >= text.length) return undefined;
      word = (word ?? "") + value;
    } else if (c === "\\") {
      if (i + 1 >= text.length) return undefined;
      word = (word ?? "") + text[++i];
    } else {
      word = (word ?? "") + c;
    }
  }
  if (word !== undefined) words.push(word);
  return words;
}
