import { readFile } from "node:fs/promises";
import { LIMITS } from "@pi-sandbox/config";
import { renderHelp } from "../actions/help.js";
import type { EntryKind, StateLayout } from "../state/layout.js";
import { inspectEntry, listEntries } from "../state/inspect.js";
import { runDoctor } from "./doctor.js";

/** Answers the actions that need no daemon: help, list, inspect, controller logs, doctor. */
export async function runLocalAction(
  layout: StateLayout,
  args: Record<string, unknown> & { action: string },
  options: { cwd: string; env: NodeJS.ProcessEnv },
): Promise<unknown> {
  const kind = (args.kind as EntryKind | undefined) ?? "instances";
  switch (args.action) {
    case "help":
      return { help: renderHelp() };
    case "list":
      await layout.ensurePrivate();
      return { [kind]: await listEntries(layout, kind) };
    case "inspect":
      await layout.ensurePrivate();
      return inspectEntry(layout, kind, args.name as string);
    case "logs": {
      await layout.ensurePrivate();
      await inspectEntry(layout, "instances", args.name as string);
      const lines = (args.lines as number | undefined) ?? LIMITS.logLinesDefault;
      const file = layout.logFile("instances", args.name as string);
      let text = "";
      try {
        text = await readFile(file, "utf8");
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      }
      const all = text.split("\n");
      if (all.at(-1) === "") all.pop();
      return { name: args.name, log: "controller", file, lines: all.slice(-lines) };
    }
    case "doctor":
      return runDoctor(layout, { config: args.config as string | undefined, cwd: options.cwd, env: options.env });
    default:
      throw new Error(`runLocalAction: ${args.action} is not local`);
  }
}
