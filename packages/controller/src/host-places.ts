// The host places no guest and no model may have without the user: the home directory's
// credentials and configuration, the system's live directories, the shared temporary directory and
// pi-sandbox's own state. One list, used by every check: mounts and host files a config puts into
// the guest (refused for every caller), a model's reads (refused) and writes (the user's yes).
import { realpath } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join, relative, sep } from "node:path";
import { isPathWithin } from "@pi-sandbox/config";

/** The places of this host, resolved once per check. */
export interface HostPlaces {
  /** Real paths of the home directory: the account's and `$HOME` (they may differ). */
  homes: string[];
  /** Real path of the pi-sandbox state directory. */
  stateRoot: string;
  /** Real path of the system temporary directory. */
  tmp: string;
  /** macOS: `~/Library` holds credentials and application data too. */
  darwin: boolean;
}

/** A protected place a path is, is in, or holds, and why it is protected. */
export interface ProtectedPlace {
  /** The protected directory (or the path itself when it holds one). */
  place: string;
  /** Why, as the end of a sentence about the path: "is in ~/.ssh, where …". */
  why: string;
}

/** Directories of the running system: processes, devices, sockets. */
const SYSTEM_DIRS = Object.freeze(["/proc", "/sys", "/dev", "/run"]);

async function real(path: string): Promise<string> {
  return realpath(path).catch(() => path);
}

/** This host's places for a state root; `env` supplies `$HOME` (default: this process's). */
export async function hostPlaces(stateRoot: string, env: NodeJS.ProcessEnv = process.env): Promise<HostPlaces> {
  const homes = [userInfo().homedir, env.HOME].filter((home): home is string => !!home && home.startsWith("/"));
  return {
    homes: [...new Set(await Promise.all(homes.map(real)))],
    stateRoot: await real(stateRoot),
    tmp: await real(tmpdir()),
    darwin: process.platform === "darwin",
  };
}

/** The name a file system may treat as equal to another: case-folded and NFC-normalised. */
export function foldName(name: string): string {
  return name.normalize("NFC").toLowerCase();
}

/**
 * Where `path` (real, absolute) meets a protected place, if it does: `/` or a directory holding a
 * home; anything in a home's dot-files and dot-directories (and `~/Library` on macOS); anything in
 * `/proc`, `/sys`, `/dev` or `/run`; the temporary directory or a directory holding it; and the
 * state directory, anything in it or holding it.
 */
export function protectedPlace(path: string, places: HostPlaces): ProtectedPlace | undefined {
  for (const home of places.homes) {
    if (isPathWithin(home, path)) {
      return {
        place: path,
        why: path === "/" ? "is the host's root directory" : `is or holds the home directory ${home}`,
      };
    }
    if (!isPathWithin(path, home)) continue;
    const first = relative(home, path).split(sep)[0]!;
    if (first.startsWith(".") || (places.darwin && foldName(first) === "library")) {
      const place = join(home, first);
      return { place, why: `is in ${place}, where credentials and configuration live` };
    }
  }
  const system = SYSTEM_DIRS.find((dir) => isPathWithin(path, dir));
  if (system) return { place: system, why: `is in ${system}, the running system's own` };
  if (isPathWithin(places.tmp, path)) {
    return { place: places.tmp, why: `is or holds ${places.tmp}, the temporary directory every process shares` };
  }
  if (isPathWithin(path, places.stateRoot) || isPathWithin(places.stateRoot, path)) {
    return {
      place: places.stateRoot,
      why: `is or holds the pi-sandbox state directory ${places.stateRoot}, with every instance's disks and sockets`,
    };
  }
  return undefined;
}

/**
 * True when `dir` (real) cannot be a project: `/`, a home directory, or a directory holding one.
 * A model whose Pi runs there gets no host path without the user's yes.
 */
export function holdsHome(dir: string, places: HostPlaces): boolean {
  return places.homes.some((home) => isPathWithin(home, dir));
}

/** `path` with its last part and every parent's case-folded, for comparing names (see {@link foldName}). */
export function foldedParts(base: string, path: string): string[] {
  return relative(base, path)
    .split(sep)
    .filter((part) => part !== "" && part !== ".")
    .map(foldName);
}
