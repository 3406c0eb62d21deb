// The command line built from `exec … -- cmd args` runs in a real shell with exactly that argv, and
// the ssh command `shell` prints splits back into the words it was made of.
import { spawnSync } from "node:child_process";
import { shellQuote } from "@pi-sandbox/config";
import { commandLine, splitShellWords } from "../src/actions/kit/shell-words.js";

test("split undoes quote, for the words the vm package's ssh line holds and for hostile ones", () => {
  const words = [
    "ssh",
    "-p",
    "40123",
    "-i",
    "/tmp/pisb ssh-x/id_ed25519",
    "-o",
    "UserKnownHostsFile=/tmp/it's",
    "root@127.0.0.1",
  ];
  expect(splitShellWords(words.map(shellQuote).join(" "))).toEqual(words);
  const odd = ["", "a b", "'", '"', "\\", "$(x)", "`x`", "*", "~", "\n\t"];
  expect(splitShellWords(commandLine(["printf", ...odd]))).toEqual(["printf", ...odd]);
});

test("split reads double quotes and backslashes as a POSIX shell does; an open quote is undefined", () => {
  expect(splitShellWords(`a "b \\"c\\" \\x" d\\ e  'f'g`)).toEqual(["a", 'b "c" \\x', "d e", "fg"]);
  expect(splitShellWords("ssh 'open")).toBeUndefined();
  expect(splitShellWords('ssh "open')).toBeUndefined();
  expect(splitShellWords("ssh \\")).toBeUndefined();
});

test("a real shell runs the command line with the argv it was built from", () => {
  const odd = ["", "a b", "'", '"', "\\", "$(echo x)", "`echo x`", "*", "~", "\n\t", "A=1", "!"];
  for (const shell of ["sh", "bash"]) {
    const run = spawnSync(shell, ["-c", commandLine(["printf", "<%s>", ...odd])], { encoding: "utf8" });
    expect(run.stdout).toBe(odd.map((word) => `<${word}>`).join(""));
  }
  // A program named like an assignment or a keyword is looked up as a program, as docker would.
  expect(spawnSync("bash", ["-c", commandLine(["if", "x"])], { encoding: "utf8" }).stderr).toMatch(
    /if: command not found/,
  );
});
