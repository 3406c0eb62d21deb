import path from "node:path";

/** The Gondolin module, loaded lazily. */
export type GondolinModule = typeof import("@earendil-works/gondolin");

let loaded: Promise<GondolinModule> | undefined;

/**
 * Imports Gondolin on first use. Gondolin fixes its session-registry directory when its module is
 * first evaluated (`session-registry.js` reads `GONDOLIN_SESSIONS_DIR`/`XDG_CACHE_HOME` at import
 * time), so before that first import we point `GONDOLIN_SESSIONS_DIR` under `stateRoot` unless the
 * user set it: VMs of this package never register in, or garbage-collect, the user's
 * `~/.cache/gondolin/sessions`. Later calls reuse the loaded module (the directory stays fixed for
 * the process).
 */
export function loadGondolin(stateRoot?: string): Promise<GondolinModule> {
  if (!loaded) {
    if (stateRoot !== undefined && process.env.GONDOLIN_SESSIONS_DIR === undefined) {
      process.env.GONDOLIN_SESSIONS_DIR = gondolinSessionsDir(stateRoot);
    }
    loaded = import("@earendil-works/gondolin");
    loaded.catch(() => {
      loaded = undefined;
    });
  }
  return loaded;
}

/** Where Gondolin's session registry lives for a state root. */
export function gondolinSessionsDir(stateRoot: string): string {
  return path.join(stateRoot, "gondolin", "sessions");
}

/**
 * Where Gondolin's MITM CA (for guest HTTPS egress) lives: one per disk. A CA shared by the whole
 * state root was created by whichever first boots raced to it, and a guest could end up trusting
 * a CA whose key another boot had just replaced. Per disk, the disk lock serialises its creation.
 */
export function gondolinCertDir(diskDir: string): string {
  return path.join(diskDir, "mitm-ca");
}
