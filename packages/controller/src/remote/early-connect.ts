// A command through a context opens its connection before the CLI loads its action table: the
// master check, ssh and the far side's start (Node and its modules there, the hello) then run
// beside this process's own module loading instead of after it. Only for commands that always go
// through the connection; nothing is sent until the CLI has parsed and validated the call as
// before, and an early connection no call takes does not keep the process alive.
import { selectContext } from "../state/contexts.js";

/** Commands that send their call over the context's connection (not sessions, copies or help). */
const EARLY = new Set(["create", "start", "stop", "suspend", "destroy", "fork", "prepare", "list", "ls", "inspect"]);

/** The `--context` value of `argv` (words after `--` are the command's own), if any. */
function contextWord(argv: readonly string[]): string | undefined {
  let context: string | undefined;
  for (let i = 0; i < argv.length && argv[i] !== "--"; i++) {
    const word = argv[i]!;
    if (word === "--context") context = argv[++i];
    else if (word.startsWith("--context=")) context = word.slice("--context=".length);
  }
  return context;
}

/**
 * For such a command of another context (its `--context`, else PI_SANDBOX_CONTEXT or `context
 * use`), starts opening the connection the call will take. Never throws: the CLI's own path meets
 * any problem and reports it.
 */
export async function connectEarly(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<void> {
  const command = argv[0];
  if (command === undefined || !EARLY.has(command)) return;
  if (argv.some((word) => word === "-h" || word === "--help")) return;
  try {
    const context = await selectContext(contextWord(argv), env);
    if (!context) return;
    const { connectContext } = await import("./connection.js");
    // Its failure is the call's to report (connectContext keeps it for the call).
    connectContext(context.name, context, env, { early: true }).catch(() => undefined);
  } catch {
    // An unknown context: the CLI says so.
  }
}
