#!/usr/bin/env node
// The `pi-sandbox` executable's entry: runs the CLI with the process's arguments.
import { traceMark, traceProcessStart } from "../trace.js";
import { runCli } from "./cli.js";

traceProcessStart("cli");

process.exitCode = await runCli(process.argv.slice(2));
traceMark("cli: done");
