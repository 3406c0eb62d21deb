#!/usr/bin/env node
// The `pi-sandbox` executable's entry: runs the CLI with the process's arguments. `start <name>`
// spawns the instance's daemon first (client/early-start.ts), so that it starts while the CLI's
// own modules load (imported below, not above).
import { startDaemonEarly } from "../client/early-start.js";
import { connectEarly } from "../remote/early-connect.js";
import { traceMark, traceProcessStart } from "../trace.js";

const argv = process.argv.slice(2);
const early = new AbortController();
await startDaemonEarly(argv, process.env, early.signal);
// Through another context: its connection opens while the CLI loads (remote/early-connect.ts).
await connectEarly(argv, process.env);
const { runCli } = await import("./cli.js");
traceProcessStart("cli");

process.exitCode = await runCli(argv);
// The early start's wait for the socket must not keep a finished CLI alive.
early.abort();
traceMark("cli: done");
