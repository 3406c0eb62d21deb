// The dashboard action: starts (or finds) the state root's local web dashboard and answers with a
// fresh link to it, or ends it. For the user only: the link's token opens a browser session that
// can stop and destroy instances, which a model has no business holding.
import * as v from "valibot";
import { ControllerError } from "../errors.js";
import { defineAction } from "./kit/define.js";
import { lazyHandler } from "./kit/lazy.js";
import { actionSchema, arg } from "./kit/parts.js";

export type { DashboardAbsent, DashboardStopped } from "./dashboard-run.js";

/** `dashboard`: a page of every instance and template, previews, logs and cost, on 127.0.0.1. */
export const dashboard = defineAction({
  name: "dashboard",
  summary:
    "start (or find) the local web dashboard of every instance and template, and return a fresh link to it; stop ends it",
  args: [
    arg("stop", "boolean", false, "end the running dashboard instead"),
    arg("status", "boolean", false, "a fresh link to the running dashboard, or running: false; starts nothing"),
  ],
  route: "local",
  userOnly: true,
  schema: actionSchema("dashboard", { stop: v.optional(v.boolean()), status: v.optional(v.boolean()) }),
  refine(args) {
    if (args.stop && args.status) {
      throw new ControllerError("CONTROLLER_BAD_INPUT", "stop and status cannot be combined", {
        hint: "Pass stop to end the dashboard, or status to see whether it runs.",
      });
    }
  },
  cli: {
    usage: "dashboard [--stop]                  a web page of every instance: previews, logs, cost",
    options: {
      stop: { type: "boolean", description: "end the running dashboard" },
      status: { type: "boolean", description: "a link to the running dashboard, if one runs; starts nothing" },
    },
    toAction: (input) => ({
      action: "dashboard",
      ...(input.values.stop === true ? { stop: true } : {}),
      ...(input.values.status === true ? { status: true } : {}),
    }),
    notes: [
      "The dashboard runs in the background, one per state root, on 127.0.0.1 only, until",
      "dashboard --stop. Each call prints a new link; opening it gives the browser a session",
      "cookie. Without a link's token, from another Host, or posted from another origin: 403.",
      "It lists every context's instances too; with --context NAME the link opens at NAME's.",
    ],
  },
  run: lazyHandler(async () => (await import("./dashboard-run.js")).runDashboard),
  formatText(result) {
    if ("running" in result) return "no dashboard runs\n";
    if ("stopped" in result) return result.stopped ? `dashboard stopped (pid ${result.pid})\n` : "no dashboard runs\n";
    return `${result.started ? "dashboard started" : "dashboard running"} (pid ${result.pid}): open\n${result.url}\n`;
  },
  brief: (result) => ("url" in result ? result.url : "stopped" in result && result.stopped ? "stopped" : "not running"),
});
