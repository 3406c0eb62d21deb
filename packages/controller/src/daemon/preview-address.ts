// The loopback address an instance's previews bind. Browsers scope cookies by host, not port, so
// previews on the shared 127.0.0.1 would receive (and could set) the cookies of every other app on
// 127.0.0.1: the user's Jupyter, Grafana, other instances' previews. Every address of 127.0.0.0/8
// is loopback on Linux and bindable without setup, so each instance gets one of its own.
//
// Allocation is crash-safe and race-free without a lock: an address belongs to the instance that
// created `addresses/<address>` under the state root (exclusive create, the file holds its name).
// The instance then records the address in its ports.json, beside its port leases, and keeps it
// on every later start. A crash between the two steps is recovered by finding the claim that
// names the instance. Destroy removes the instance directory, then the claim; a claim left by a
// crash in between names an instance that no longer exists and is never handed out again (a new
// instance of the same name reuses it). Where only 127.0.0.1 exists (macOS by default), previews
// stay there, shared, and the reason is reported.

import { randomInt } from "node:crypto";
import { mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { DEFAULT_PREVIEW_ADDRESS, JsonFilePortLeaseStore } from "@pi-sandbox/ingress";
import type { StateLayout } from "../state/layout.js";

/** Where an instance's previews listen, and whether that address is shared with other apps. */
export interface PreviewAddress {
  /** The loopback address previews bind and their URLs name. */
  address: string;
  /** Set when previews fall back to the shared 127.0.0.1: why, for inspect and the log. */
  shared?: string;
}

/** How to test an address and pick candidates; tests replace them. */
export interface AddressOptions {
  /** Whether this host can bind `address` (false where the loopback interface lacks it). */
  canBind?: (address: string) => Promise<boolean>;
  /** A candidate address; default a random one of 127.1.0.1-127.254.255.254. */
  candidate?: () => string;
}

/** How many taken candidates are skipped before giving up on an address of its own. */
const attempts = 64;

/**
 * A random address in 127.1.0.0-127.254.255.255, last byte 1-254. It leaves out all of
 * 127.0.x.x (127.0.0.1 itself; Debian's 127.0.1.1 for the hostname; systemd-resolved's
 * 127.0.0.53 and 127.0.0.54) and the 127.0.0.0 and 127.255.255.255 broadcast-looking ends.
 */
export function randomPreviewAddress(): string {
  return `127.${randomInt(1, 255)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
}

/** True when a listener can bind `address` (any port); false when the host has no such address. */
export function canBindAddress(address: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ host: address, port: 0, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/**
 * The preview address of instance `name`: the one its ports.json records (restoring its claim
 * if needed), else a newly claimed one, recorded before this resolves. Falls back to the shared
 * 127.0.0.1, with the reason in `shared`, where the host cannot bind other loopback addresses.
 */
export async function previewAddressFor(
  layout: StateLayout,
  name: string,
  options: AddressOptions = {},
): Promise<PreviewAddress> {
  const canBind = options.canBind ?? canBindAddress;
  const candidate = options.candidate ?? randomPreviewAddress;
  const store = new JsonFilePortLeaseStore(layout.portsFile(name));
  await mkdir(layout.addressesDir(), { recursive: true, mode: 0o700 });
  const recorded = (await store.address()) ?? (await claimNaming(layout, name));
  if (recorded !== undefined && (await claim(layout, recorded, name))) {
    if (!(await canBind(recorded))) return sharedFallback(`this host cannot bind ${recorded}`);
    await store.setAddress(recorded);
    return { address: recorded };
  }
  for (let attempt = 0; attempt < attempts; attempt++) {
    const address = candidate();
    if (address === DEFAULT_PREVIEW_ADDRESS) continue;
    if (!(await canBind(address))) {
      return sharedFallback(`this host's loopback interface has only 127.0.0.1 (binding ${address} failed)`);
    }
    if (!(await claim(layout, address, name))) continue;
    await store.setAddress(address);
    return { address };
  }
  return sharedFallback(`no free loopback address found in ${attempts} tries`);
}

/** Forgets the claim of `name`'s address (after its directory is gone, at destroy). */
export async function releasePreviewAddress(layout: StateLayout, name: string, address?: string): Promise<void> {
  const owned = address ?? (await claimNaming(layout, name));
  if (owned === undefined) return;
  if ((await claimOwner(layout, owned)) === name) await rm(layout.addressClaimFile(owned), { force: true });
}

/** The recorded address of `name`, read before its directory goes (undefined when none). */
export async function recordedPreviewAddress(layout: StateLayout, name: string): Promise<string | undefined> {
  try {
    return await new JsonFilePortLeaseStore(layout.portsFile(name)).address();
  } catch {
    return undefined; // an unreadable ports.json: the claim is then found by its content
  }
}

function sharedFallback(reason: string): PreviewAddress {
  return {
    address: DEFAULT_PREVIEW_ADDRESS,
    shared: `${reason}; previews use 127.0.0.1 and share its cookies with the host's other localhost apps and other instances`,
  };
}

/** Claims `address` for `name`: true when created now or already `name`'s, false when another's. */
async function claim(layout: StateLayout, address: string, name: string): Promise<boolean> {
  try {
    await writeFile(layout.addressClaimFile(address), `${name}\n`, { flag: "wx", mode: 0o600 });
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    return (await claimOwner(layout, address)) === name;
  }
}

/** The instance a claim names, or undefined when there is no such claim. */
async function claimOwner(layout: StateLayout, address: string): Promise<string | undefined> {
  try {
    return (await readFile(layout.addressClaimFile(address), "utf8")).trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/** The address whose claim names `name` (a create that crashed before recording it), if any. */
async function claimNaming(layout: StateLayout, name: string): Promise<string | undefined> {
  let entries: string[];
  try {
    entries = await readdir(layout.addressesDir());
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  for (const entry of entries.sort()) {
    if (!/^127\.[0-9.]+$/.test(entry)) continue;
    if ((await claimOwner(layout, entry)) === name) return entry;
  }
  return undefined;
}
