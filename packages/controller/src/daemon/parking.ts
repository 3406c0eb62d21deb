// Parking an instance that suspended itself: its daemon hands the previews to the state root's
// waker (waker/) and exits, so a parked instance costs no daemon of its own. The next daemon of the
// instance (started by the waker for a request, or by a client for an action) takes them back
// before it answers, and sleeps as the parked one did until that request or action wakes it.
import { existsSync } from "node:fs";
import { mkdir, open } from "node:fs/promises";
import { dirname } from "node:path";
import { DEFAULT_PREVIEW_ADDRESS, type PreviewGateway, type PreviewInfo, type PreviewLink } from "@pi-sandbox/ingress";
import { messageOf } from "@pi-sandbox/config";
import { daemonEnv, spawnDetached, wakerEntry } from "../daemon-process.js";
import { ensurePrivateDir, type StateLayout } from "../state/layout.js";
import { pidAlive, readPidFile, socketAccepts } from "../state/liveness.js";
import { readStatus } from "../state/records.js";
import { WakerLink, type ParkedPreview } from "../state/waker-call.js";
import { portsTakenByInstances } from "./host-ports.js";
import type { InstanceRuntime } from "./runtime.js";
import { toControllerError, type InstanceState } from "./state.js";

/** How long a fresh waker may take to open its socket, in ms. */
const WAKER_START_MS = 10_000;

/** True when the waker of the state root runs and accepts connections. */
async function wakerLive(layout: StateLayout): Promise<boolean> {
  const pid = await readPidFile(layout.wakerPidFile());
  return pid !== undefined && pidAlive(pid) && (await socketAccepts(layout.wakerSocketPath()));
}

/** Makes sure the state root's waker runs, spawning it detached (as clients spawn daemons) if needed. */
export async function ensureWaker(layout: StateLayout): Promise<void> {
  if (await wakerLive(layout)) return;
  const entry = wakerEntry();
  if (!existsSync(entry)) throw new Error(`the waker's script ${entry} is missing`);
  // Where it listens must be private before it starts (a long state path puts it under /tmp).
  await ensurePrivateDir(dirname(layout.wakerSocketPath()));
  await mkdir(dirname(layout.wakerLogFile()), { recursive: true, mode: 0o700 });
  const log = await open(layout.wakerLogFile(), "a", 0o600);
  // The daemon's own Node (at the CLI's floor). The waker loads no state layout: it is told its files.
  const args = ["--root", layout.root, "--socket", layout.wakerSocketPath(), "--pid-file", layout.wakerPidFile()];
  const child = spawnDetached(
    process.execPath,
    entry,
    [...args, "--log", layout.wakerLogFile()],
    log.fd,
    daemonEnv(process.env, layout.root),
  );
  await log.close();
  for (const deadline = Date.now() + WAKER_START_MS; Date.now() < deadline;) {
    if (await wakerLive(layout)) return;
    // Exit 0: another waker won the pid file; it is opening its socket.
    if (child.exited !== undefined && child.exited !== 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const exited = child.exited;
  throw new Error(
    exited !== undefined && exited !== 0
      ? `the waker exited at its start (code ${exited}); see ${layout.wakerLogFile()}`
      : `the waker did not answer within ${WAKER_START_MS / 1000} s`,
  );
}

/** A link to the state root's waker, started if none runs. */
async function openWaker(layout: StateLayout): Promise<WakerLink> {
  await ensureWaker(layout);
  const link = await WakerLink.open(layout);
  if (!link) throw new Error("the waker does not answer");
  return link;
}

/** A preview as the gateway lists it, as the waker keeps it: its links back to the declared form. */
function parkedPreview(info: PreviewInfo): ParkedPreview {
  const links: PreviewLink[] = info.links.map((link) => {
    const kept: PreviewLink = {
      url: link.external || !link.url.startsWith(info.origin) ? link.url : link.url.slice(info.origin.length),
      title: link.title,
    };
    if (link.description !== undefined) kept.description = link.description;
    if (link.folder !== undefined) kept.folder = link.folder;
    return kept;
  });
  return { key: info.key, hostPort: info.hostPort, guestPort: info.guestPort, links };
}

/**
 * A gateway for the instance on `address` with `previews` open on their leased ports, as the
 * instance's boot opens one (lifecycle.ts); requests wake the instance through `state.wake`.
 */
async function reopenGateway(
  state: InstanceState,
  runtime: InstanceRuntime,
  address: string,
  previews: readonly ParkedPreview[],
): Promise<PreviewGateway> {
  const { layout, name, log } = state;
  const gateway = runtime.openGateway(state.guestPorts, {
    portsFile: layout.portsFile(name),
    address,
    avoidPorts: () => portsTakenByInstances(layout),
    logger: log.child("[preview]"),
    wake: () => state.wake(),
  });
  state.gateway = gateway;
  for (const { key, guestPort, links } of previews) {
    try {
      await gateway.open({ key, guestPort, links });
    } catch (error) {
      const e = toControllerError(error);
      state.recordError(e.code, `preview ${key} could not be bound again: ${e.message}`, e.hint);
    }
  }
  return gateway;
}

/**
 * Hands the previews of an instance that suspended itself (no VM, asleep) to the waker; true once
 * the waker listens on them, and the daemon exits next. False (the daemon keeps them and stays, as
 * before parking existed) when no waker could be started or it could not bind them. Between this
 * daemon closing a preview's listener and the waker binding it, a request is refused: a few ms.
 * Run in the lifecycle queue, so no start runs meanwhile.
 */
export async function parkInstance(state: InstanceState, runtime: InstanceRuntime): Promise<boolean> {
  const { layout, name, log } = state;
  const gateway = state.gateway;
  const address = gateway?.address ?? state.status.previewAddress?.address ?? DEFAULT_PREVIEW_ADDRESS;
  const previews = (gateway?.list() ?? []).map(parkedPreview);
  let link: WakerLink | undefined;
  try {
    link = await openWaker(layout);
  } catch (error) {
    log.warn(`parking failed: ${messageOf(error)}; this controller keeps the previews`);
    return false;
  }
  try {
    state.gateway = undefined;
    await gateway?.closeAll();
    for (let attempt = 1; ; attempt++) {
      try {
        await link.request({ type: "hold", name, address, previews });
        break;
      } catch (error) {
        // A waker that was about to exit (it held nothing for a while) refuses: a fresh one takes it.
        if (attempt >= 3 || !/exiting/.test(messageOf(error))) throw error;
        link.close();
        await new Promise((r) => setTimeout(r, 200));
        link = await openWaker(layout);
      }
    }
    log.info(
      `parked: the waker holds ${previews.length} preview(s) and starts a controller for the next request or action; this one exits`,
    );
    return true;
  } catch (error) {
    log.warn(`parking failed: ${messageOf(error)}; this controller keeps the previews`);
    if (gateway) await reopenGateway(state, runtime, address, previews);
    return false;
  } finally {
    link.close();
  }
}

/**
 * At the daemon's start, before it answers anyone: takes the instance's previews back from the
 * waker if it holds them. A parked instance (suspended by `idle`) gets them bound in this daemon,
 * which sleeps as the parking one did (`asleep()`): the waiting connections then come to its
 * gateway, and the first request or action resumes the instance. Previews held for an instance no
 * longer parked are dropped (the waiting connections get a 503); a parked instance whose previews
 * nobody holds (its waker was killed) is an ordinary suspended one from now on.
 */
export async function adoptParked(state: InstanceState, runtime: InstanceRuntime, asleep: () => void): Promise<void> {
  if (state.kind !== "instances") return;
  const { layout, name, log } = state;
  const link = await WakerLink.open(layout).catch((error: unknown) => {
    log.warn(`the waker cannot be asked for this instance's previews: ${messageOf(error)}`);
    return undefined;
  });
  try {
    const released = await link?.request({ type: "release", name }, 5_000).catch((error: unknown) => {
      log.warn(`the waker did not hand the previews back: ${messageOf(error)}`);
      return undefined;
    });
    const held = released?.type === "released" && released.held ? released : undefined;
    const status = await readStatus(layout, "instances", name);
    const parked = status?.state === "suspended" && status.suspendedBy === "idle";
    if (status && parked && held) {
      state.status = status;
      state.errors = [...(status.errors ?? [])];
      await reopenGateway(state, runtime, held.address, held.previews);
      asleep();
      log.info(`took the previews back from the waker (${held.waiting} connection(s) waiting); asleep until used`);
    } else if (status && parked) {
      state.status = status;
      state.errors = [...(status.errors ?? [])];
      delete state.status.suspendedBy;
      await state.setState("suspended");
      log.info("suspended while unused, but nothing held its previews any more: start resumes it");
    }
    if (held && link) {
      await link
        .request({ type: "taken", name, listening: parked && state.gateway !== undefined }, 5_000)
        .catch((error: unknown) => log.warn(`telling the waker: ${messageOf(error)}`));
    }
  } finally {
    link?.close();
  }
}
