// The command that launches Pi in the review directory inside the instance.
import { shellQuote } from "@pi-sandbox/config";
import type { ReviewLayout } from "./layout.js";

/** Options of `launchCommand`. */
export interface LaunchCommandOptions {
  /** Program part, run from the candidate directory (default Pi with the sandbox extension). */
  piCommand: string;
  /** `provider/model` to select, when live mode set one up. */
  model?: string;
  /** Extra words appended after the model (e.g. a prompt). */
  extraArgs?: string[];
}

/**
 * The guest shell command that runs this checkout's Pi from the current candidate with the
 * isolated agent directory. It goes through the `current` symlink, so it stays valid after later
 * refreshes (a Pi already running keeps the files it loaded).
 */
export function launchCommand(layout: ReviewLayout, options: LaunchCommandOptions): string {
  const words = [
    `cd ${shellQuote(layout.current)}`,
    "&&",
    `PI_CODING_AGENT_DIR=${shellQuote(layout.agentDir)}`,
    options.piCommand,
  ];
  if (options.model) words.push("--model", shellQuote(options.model));
  for (const extra of options.extraArgs ?? []) words.push(shellQuote(extra));
  return words.join(" ");
}
