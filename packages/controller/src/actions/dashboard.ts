// The dashboard action: starts (or finds) the state root's local web dashboard and answers with a
// fresh link to it, or ends it. For the user only: the link's token opens a browser session that
// can stop and destroy instances, which a model has no business holding.
import * as v from "valibot";
import { ensureDashboard, stopDashboard, type DashboardInfo } from "../client/dashboard.js";
import { defineAction } from "./define.js";
import { actionSchema, arg } from "./parts.js";

/** What `dashboard --stop` answers. */
export interface DashboardStopped {
  /** True when a running dashboard was ended. */
  stopped: boolean;
  /** Its pid. */
  pid?: number;
}

/** `dashboard`: a page of every instance and template, previews, logs and cost, on 127.0.0.1. */
export const dashboard = defineAction({
  name: "dashboard",
  summary:
    "start (or find) the local web dashboard of every instance and template, and return a fresh link to it; stop ends it",
  args: [arg("stop", "boolean", false, "end the running dashboard instead")],
  route: "local",
  userOnly: true,
  schema: actionSchema("dashboard", { stop: v.optional(v.boolean()) }),
  cli: {
    usage: "dashboard [--stop]                  a web page of every instance: previews, logs, cost",
    options: { stop: { type: "boolean", description: "end the running dashboard" } },
    toAction: (input) => ({ action: "dashboard", ...(input.values.stop === true ? { stop: true } : {}) }),
    notes: [
      "The dashboard runs in the background, one per state root, on 127.0.0.1 only, until",
      "dashboard --stop. Each call prints a new link; opening it gives the browser a session",
      "cookie. Without a link's token, from another Host, or posted from another origin: 403.",
    ],
  },
  async run(args, ctx): Promise<DashboardInfo | DashboardStopped> {
    if (args.stop) return stopDashboard(ctx.layout);
    return ensureDashboard(ctx.layout, { env: ctx.env });
  },
  formatText(result) {
    if ("stopped" in result) return result.stopped ? `dashboard stopped (pid ${result.pid})\n` : "no dashboard runs\n";
    return `${result.started ? "dashboard started" : "dashboard running"} (pid ${result.pid}): open\n${result.url}\n`;
  },
  brief: (result) => ("stopped" in result ? (result.stopped ? "stopped" : "not running") : result.url),
});
