// Egress approvals: `egress` lists what an instance's guest was allowed and refused beyond its
// allowedHosts (from its ledger), what the user granted it and what waits for an answer now;
// `egress-approve`, `egress-deny` and `egress-revoke` are the user's answers. The answers are for
// the user only: a model's call is refused, and the guest reaches no socket of ours.
import * as v from "valibot";
import { HOST_PATTERN } from "@pi-sandbox/config";
import { ControllerError } from "../errors.js";
import { readAsks, readGrants, updateGrants, type EgressAsk, type EgressGrant } from "../state/egress.js";
import { inspectEntry } from "../state/inspect.js";
import { readLedger } from "../state/ledger.js";
import { defineAction, type CliInput } from "./kit/define.js";
import type { EgressAnswered } from "./kit/context.js";
import { actionSchema, arg, name, nameArg, positional } from "./kit/parts.js";
import { oneLine } from "./kit/text.js";

/** A host as the user types it: a name, an IP address or a `*.` wildcard, as in allowedHosts. */
const host = v.pipe(
  v.string(),
  v.regex(
    HOST_PATTERN,
    "must be a host name like registry.npmjs.org, an IPv4 address, or a wildcard like *.example.com",
  ),
  v.transform((value: string) => value.toLowerCase()),
);
// An internet host's name: the guest's way out, never this machine (host.sandbox.internal is hostPorts').
const hostArg = arg("host", "string", true, "the host (or *.wildcard) the guest asked for, as egress lists it", "none");

/** What the guest's requests to one host came to, from the ledger. */
export interface EgressTally {
  host: string;
  /** Requests let through, and refused. */
  allowed: number;
  denied: number;
  /** Body bytes the guest sent to it and got from it, counted on the host (headers not counted). */
  bytesOut: number;
  bytesIn: number;
  /** The rule of the last decision (allowedHosts, approved once, nobody to ask, …). */
  lastRule: string;
  /** When the last request came (ISO time). */
  last: string;
}

/** What `egress` returns. */
export interface EgressView {
  name: string;
  /** Hosts the user allowed for this instance beyond its allowedHosts. */
  grants: EgressGrant[];
  /** Requests held for an answer now. */
  waiting: EgressAsk[];
  /** The hosts the guest asked for, most requests first (at most {@link EGRESS_HOSTS_SHOWN}). */
  hosts: EgressTally[];
  /** How many more hosts the ledger names (a guest may ask for any number of names). */
  hostsLeftOut?: number;
}

/** Most hosts `egress` lists. */
export const EGRESS_HOSTS_SHOWN = 200;

/** The ledger's egress decisions and byte summaries, one tally per host. */
function tallies(dir: string): EgressTally[] {
  const byHost = new Map<string, EgressTally>();
  for (const entry of readLedger(dir)) {
    if (entry.kind !== "egress" && entry.kind !== "egress-bytes") continue;
    const d = entry.data;
    const key = String(d.host);
    const tally = byHost.get(key) ?? {
      host: key,
      allowed: 0,
      denied: 0,
      bytesOut: 0,
      bytesIn: 0,
      lastRule: "",
      last: entry.at,
    };
    byHost.set(key, tally);
    if (entry.kind === "egress-bytes") {
      tally.bytesOut += Number(d.bytesOut) || 0;
      tally.bytesIn += Number(d.bytesIn) || 0;
      continue;
    }
    if (d.allowed === true) tally.allowed += 1;
    else tally.denied += 1;
    tally.lastRule = String(d.rule);
    tally.last = entry.at;
  }
  return [...byHost.values()].sort((a, b) => b.allowed + b.denied - (a.allowed + a.denied));
}

/** A byte count in B, KiB, MiB or GiB (one decimal above B). */
function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

function formatView(view: EgressView): string {
  const lines: string[] = [];
  for (const ask of view.waiting) {
    lines.push(
      `waiting  ${ask.host}:${ask.port} (${ask.protocol} ${ask.method}), ${ask.waiting} request(s) until ${ask.until}: pi-sandbox egress approve ${view.name} ${ask.host} [--once]`,
    );
  }
  for (const grant of view.grants) lines.push(`granted  ${grant.host} by ${grant.by} at ${grant.at}`);
  for (const t of view.hosts) {
    lines.push(
      `${String(t.allowed).padStart(5)} allowed ${String(t.denied).padStart(5)} denied ${bytes(t.bytesOut).padStart(9)} out ${bytes(t.bytesIn).padStart(9)} in  ${t.host}  (last: ${t.lastRule}, ${t.last})`,
    );
  }
  if (view.hostsLeftOut) lines.push(`(${view.hostsLeftOut} hosts with fewer requests left out)`);
  if (lines.length === 0) lines.push(`${view.name}'s guest has asked for no host yet`);
  return lines.map((line) => `${oneLine(line)}\n`).join("");
}

export const egress = defineAction({
  name: "egress",
  summary:
    "what an instance's guest reached and was refused (requests per host, the rule, body bytes each way), the hosts the user allowed it beyond allowedHosts, and the requests waiting for the user's answer",
  args: [nameArg, arg("waiting", "boolean", false, "only the requests waiting now (no counts; default false)")],
  route: "local",
  schema: actionSchema("egress", { name, waiting: v.optional(v.boolean()) }),
  cli: {
    usage: "egress <name>   hosts the guest asked for, grants, and what waits (egress approve|deny|revoke)",
    toAction: (input) => ({ action: "egress", name: positional(input, 0, "a name", "egress") }),
  },
  run: async (args, ctx): Promise<EgressView> => {
    await inspectEntry(ctx.layout, "instances", args.name);
    const waiting = await readAsks(ctx.layout, args.name);
    if (args.waiting) return { name: args.name, grants: [], waiting, hosts: [] };
    const hosts = tallies(ctx.layout.ledgerDir("instances", args.name));
    return {
      name: args.name,
      grants: await readGrants(ctx.layout, args.name),
      waiting,
      hosts: hosts.slice(0, EGRESS_HOSTS_SHOWN),
      ...(hosts.length > EGRESS_HOSTS_SHOWN ? { hostsLeftOut: hosts.length - EGRESS_HOSTS_SHOWN } : {}),
    };
  },
  formatText: formatView,
  brief: (view) => `${view.waiting.length} waiting, ${view.grants.length} granted, ${view.hosts.length} hosts`,
});

/** The `<name> <host>` words of an egress answer's command line. */
function nameAndHost(input: CliInput, command: string): { name: string; host: string } {
  return { name: positional(input, 0, "a name", command), host: positional(input, 1, "a host", command) };
}

function formatAnswered(result: EgressAnswered): string {
  const settled = result.answered.map((a) => `${a.host} (${a.requests} request(s))`).join(", ");
  const what = result.answer === "deny" ? "refused" : "let through";
  return `${settled ? `${what}: ${settled}\n` : ""}${result.granted ? `${result.host} is allowed for ${result.name} until egress revoke\n` : ""}`;
}

export const egressApprove = defineAction({
  name: "egress-approve",
  summary:
    "let the guest's requests waiting for a host through; without once, also allow that host for this instance from now on (kept on the host, never in sandbox.yaml)",
  args: [nameArg, hostArg, arg("once", "boolean", false, "only the requests waiting now (default false)")],
  route: "daemon",
  userOnly: true,
  hostOnly: true,
  schema: actionSchema("egress-approve", { name, host, once: v.optional(v.boolean()) }),
  cli: {
    usage: "egress approve <name> <host> [--once]   let a waiting request out (and the host for good)",
    options: { once: { type: "boolean", description: "only the requests waiting now; the host is not kept" } },
    toAction: (input) => ({
      action: "egress-approve",
      ...nameAndHost(input, "egress approve"),
      ...(input.values.once === true ? { once: true } : {}),
    }),
  },
  run: (args, ctx) => ctx.egress.answer(args.host, args.once ? "once" : "instance", ctx.caller),
  formatText: formatAnswered,
  brief: (result) => (result.granted ? `${result.host} allowed` : `${result.answered.length} let through`),
});

export const egressDeny = defineAction({
  name: "egress-deny",
  summary: "refuse the guest's requests waiting for a host now (the host is refused unasked for a minute)",
  args: [nameArg, hostArg],
  route: "daemon",
  userOnly: true,
  hostOnly: true,
  schema: actionSchema("egress-deny", { name, host }),
  cli: {
    usage: "egress deny <name> <host>   refuse a waiting request",
    toAction: (input) => ({
      action: "egress-deny",
      ...nameAndHost(input, "egress deny"),
    }),
  },
  run: (args, ctx) => ctx.egress.answer(args.host, "deny", ctx.caller),
  formatText: formatAnswered,
  brief: (result) => `${result.answered.length} refused`,
});

export const egressRevoke = defineAction({
  name: "egress-revoke",
  summary: "take back a host allowed for this instance: its next request is asked about again",
  args: [nameArg, hostArg],
  route: "local",
  userOnly: true,
  schema: actionSchema("egress-revoke", { name, host }),
  cli: {
    usage: "egress revoke <name> <host>   take back a host allowed for an instance",
    toAction: (input) => ({
      action: "egress-revoke",
      ...nameAndHost(input, "egress revoke"),
    }),
  },
  run: async (args, ctx): Promise<{ name: string; host: string; revoked: true }> => {
    await inspectEntry(ctx.layout, "instances", args.name);
    if (!(await readGrants(ctx.layout, args.name)).some((g) => g.host === args.host)) {
      throw new ControllerError(
        "CONTROLLER_EGRESS_NO_GRANT",
        `${args.host} is not allowed for ${args.name} by a grant`,
        {
          hint: `pi-sandbox egress ${args.name} lists its grants; hosts in allowedHosts come from its sandbox.yaml, not from a grant.`,
          details: { name: args.name, host: args.host },
        },
      );
    }
    // The daemon reads the grants at each request it decides, so this holds from the next one.
    await updateGrants(ctx.layout, args.name, (grants) => grants.filter((g) => g.host !== args.host));
    return { name: args.name, host: args.host, revoked: true };
  },
  formatText: (result) => `${result.host} is no longer allowed for ${result.name}\n`,
  brief: (result) => `${result.host} revoked`,
});
