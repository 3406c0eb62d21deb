// `network.hostPorts` against the preview ports of this host. A host port opens the host's
// 127.0.0.1:<port> to the guest; if a preview gateway listens there, the guest would reach that
// preview (its own instance's, or another instance's, whose services it could then drive) instead
// of the host service it was given. Previews keep their host ports across runs in ports.json, so
// those files say which ports are taken, running or not. The other way round, a new preview
// port avoids every instance's leases and every instance's host ports (`portsTakenByInstances`).

import type { SandboxConfig } from "@pi-sandbox/config";
import { JsonFilePortLeaseStore } from "@pi-sandbox/ingress";
import { ControllerError } from "../errors.js";
import type { StateLayout } from "../state/layout.js";
import { listEntryNames, readRecord } from "../state/records.js";

/** The host ports of a config; a record written before `hostPorts` existed has none. */
export function hostPortsOf(config: SandboxConfig): number[] {
  return config.network.hostPorts ?? [];
}

/** The preview leases of one instance; an unreadable ports.json reads as none (its own gateway reports it). */
async function leasesOf(layout: StateLayout, instance: string): Promise<Record<string, number>> {
  try {
    return await new JsonFilePortLeaseStore(layout.portsFile(instance)).entries();
  } catch {
    return {};
  }
}

/**
 * Every host port that instances of this state root hold or expect: their previews' leases, and
 * their `network.hostPorts` (host services their guests reach, which may not be listening right
 * now). A new preview port must be none of them.
 */
export async function portsTakenByInstances(layout: StateLayout): Promise<Set<number>> {
  const taken = new Set<number>();
  for (const instance of await listEntryNames(layout, "instances")) {
    for (const port of Object.values(await leasesOf(layout, instance))) taken.add(port);
    const record = await readRecord(layout, "instances", instance).catch(() => undefined);
    // A record written before network.hostPorts existed has none.
    for (const port of record?.config.network?.hostPorts ?? []) taken.add(port);
  }
  return taken;
}

/** One host port that is also a preview's host port. */
export interface HostPortConflict {
  /** The port. */
  port: number;
  /** The instance whose preview holds it. */
  instance: string;
  /** That preview's key (a service name, or `port-N`). */
  preview: string;
}

/** Every host port that an instance's preview holds, per the instances' ports.json files. */
export async function hostPortConflicts(
  layout: StateLayout,
  hostPorts: readonly number[],
): Promise<HostPortConflict[]> {
  if (hostPorts.length === 0) return [];
  const wanted = new Set(hostPorts);
  const conflicts: HostPortConflict[] = [];
  for (const instance of await listEntryNames(layout, "instances")) {
    for (const [preview, port] of Object.entries(await leasesOf(layout, instance))) {
      if (wanted.has(port)) conflicts.push({ port, instance, preview });
    }
  }
  return conflicts.sort((a, b) => a.port - b.port);
}

/**
 * Refuses a boot of `name` whose host ports include a preview's host port, with
 * CONTROLLER_HOST_PORT_CONFLICT naming each one.
 */
export async function assertHostPortsFree(
  layout: StateLayout,
  name: string,
  hostPorts: readonly number[],
): Promise<void> {
  const conflicts = await hostPortConflicts(layout, hostPorts);
  if (conflicts.length === 0) return;
  const described = conflicts.map(
    (c) => `${c.port} (preview ${c.preview} of ${c.instance === name ? "this instance" : `instance ${c.instance}`})`,
  );
  throw new ControllerError(
    "CONTROLLER_HOST_PORT_CONFLICT",
    `network.hostPorts of ${name} includes the host port of a preview: ${described.join(", ")}; the guest would reach that preview instead of a host service`,
    {
      hint:
        "Host ports are fixed when an instance is created: create it again with another port in network.hostPorts. " +
        "Previews get their ports from the system's ephemeral range (32768-60999 on Linux); a host service below it never meets one.",
      details: { conflicts },
    },
  );
}
