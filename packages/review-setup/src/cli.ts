#!/usr/bin/env node
// The review-setup executable's entry: runs main with the process's arguments; Ctrl-C aborts. A
// question (a restart) is asked only when stdin and stderr are a terminal.
import { createInterface } from "node:readline/promises";
import { main } from "./main.js";

/** Asks on the terminal; resolves with the answer line. */
async function ask(question: string): Promise<string> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return await rl.question(question);
  } finally {
    rl.close();
  }
}

const controller = new AbortController();
process.once("SIGINT", () => controller.abort(new Error("interrupted")));
process.exitCode = await main(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  cwd: process.env.INIT_CWD ?? process.cwd(),
  signal: controller.signal,
  ...(process.stdin.isTTY && process.stderr.isTTY ? { ask } : {}),
});
