// The dashboard action's handler (actions/dashboard.ts), loaded on its first call: it brings the
// dashboard's launcher, tokens and record, which no other command needs.
import { ensureDashboard, findDashboard, stopDashboard, type DashboardInfo } from "../dashboard/launch.js";
import type { LocalContext } from "./kit/define.js";

/** What `dashboard --stop` answers. */
export interface DashboardStopped {
  /** True when a running dashboard was ended. */
  stopped: boolean;
  /** Its pid. */
  pid?: number;
}

/** What `dashboard` with `status` answers when none runs. */
export interface DashboardAbsent {
  /** Always false. */
  running: false;
}

/** Starts (or finds) the dashboard, reports on it, or ends it. */
export async function runDashboard(
  args: { stop?: boolean | undefined; status?: boolean | undefined },
  ctx: LocalContext,
): Promise<DashboardInfo | DashboardStopped | DashboardAbsent> {
  if (args.stop) return stopDashboard(ctx.layout);
  if (args.status) return (await findDashboard(ctx.layout)) ?? { running: false };
  return ensureDashboard(ctx.layout, { env: ctx.env });
}
