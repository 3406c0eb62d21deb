// The environment of a test that sends calls through a context without reaching any machine: its
// own config, runtime and state directories under `base`, ssh being the program the test writes
// at `<base>/ssh`, no PI_SANDBOX_CONTEXT from the caller's shell, and a context `far` added.
import { join } from "node:path";
import { addContext } from "../../src/state/contexts.js";

/** The environment described above, with `far` (ssh://me@far.example) in its contexts. */
export async function contextTestEnv(base: string): Promise<NodeJS.ProcessEnv> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    XDG_CONFIG_HOME: join(base, "config"),
    XDG_RUNTIME_DIR: join(base, "run"),
    PI_SANDBOX_HOME: join(base, "state"),
    PI_SANDBOX_SSH: join(base, "ssh"),
  };
  delete env.PI_SANDBOX_CONTEXT;
  await addContext("far", "ssh://me@far.example", env);
  return env;
}
