#!/usr/bin/env node
// The `pi-sandbox` executable's entry: runs the CLI with the process's arguments.
import { runCli } from "./cli.js";

process.exitCode = await runCli(process.argv.slice(2));
