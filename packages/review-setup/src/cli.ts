#!/usr/bin/env node
// The review-setup executable's entry: runs main with the process's arguments; Ctrl-C aborts.
import { main } from "./main.js";

const controller = new AbortController();
process.once("SIGINT", () => controller.abort(new Error("interrupted")));
process.exitCode = await main(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  cwd: process.env.INIT_CWD ?? process.cwd(),
  signal: controller.signal,
});
