// `pi-sandbox start <name>`: the instance's daemon is started from the command line alone, before
// the CLI loads its action table, so the daemon's Node start and module loading run beside the
// CLI's own instead of after them. Nothing is sent to it here: the call goes when the CLI has
// parsed and validated the command as always, and its `ensureDaemon` waits for this daemon rather
// than spawning a second. Anything unusual (another context, options before the name, a name with
// no instance, a state root that is not private) leaves the start to the CLI's ordinary path.
import { StateLayout } from "../state/layout.js";
import { readRecord } from "../state/records.js";
import { selectContext } from "../state/contexts.js";
import { ensureDaemon } from "./spawn.js";

/**
 * For `start <name> …` of an existing local instance, spawns its daemon if none runs; resolves
 * once it is spawned (not once it answers) or nothing was to be done. Never throws: a failed early
 * start is the ordinary path's to repeat and report.
 */
export async function startDaemonEarly(
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
  /** Ends the wait for the daemon's socket (the CLI aborts it when it is done, whatever it did). */
  signal: AbortSignal,
): Promise<void> {
  const [command, name] = argv;
  if (command !== "start" || name === undefined || name.startsWith("-")) return;
  if (argv.some((word) => word === "-h" || word === "--help" || word === "--context" || word.startsWith("--context=")))
    return;
  try {
    // Another machine's instance (PI_SANDBOX_CONTEXT, `pi-sandbox context use`): started there.
    if (await selectContext(undefined, env)) return;
    const layout = StateLayout.fromEnv(env);
    layout.entryDir("instances", name); // refuses a name no instance can have
    await layout.ensurePrivate();
    if (!(await readRecord(layout, "instances", name))) return;
    await new Promise<void>((resolve) => {
      ensureDaemon(layout, "instances", name, { env, signal, onSpawned: resolve }).then(resolve, () => resolve());
    });
  } catch {
    // The CLI's own path meets the same problem and reports it.
  }
}
