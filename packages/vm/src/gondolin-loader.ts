// Loading Gondolin lazily, with its session registry under our state root.
import { gondolinSessionsDir } from "./filenames.js";

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
