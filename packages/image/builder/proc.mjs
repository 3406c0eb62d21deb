// Running commands and reporting progress. Progress lines go to the sink setLogSink installs
// (stderr by default), so a CLI can print them and stdout stays free for a result.
import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { readFile } from "node:fs/promises";

const started = Date.now();

/** Children still running, so that an interrupted build stops them instead of orphaning them. */
const running = new Set();
let handlersInstalled = false;

function installSignalHandlers() {
  if (handlersInstalled) return;
  handlersInstalled = true;
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.once(signal, () => {
      log(`interrupted (${signal}); stopping ${running.size} child process(es). The next run cleans up.`);
      for (const child of running) child.kill("SIGTERM");
      process.exit(128 + (signal === "SIGINT" ? 2 : signal === "SIGTERM" ? 15 : 1));
    });
  }
}

let sink = (message, seconds) => process.stderr.write(`[image ${seconds}s] ${message}\n`);

/** Send progress lines to `fn(message, seconds)` from now on (seconds since start, padded). */
export function setLogSink(fn) {
  sink = fn;
}

/** Report one progress line with the seconds since start. */
export function log(message) {
  sink(message, ((Date.now() - started) / 1000).toFixed(1).padStart(6));
}

export class CommandError extends Error {
  constructor(message, details) {
    super(message);
    this.name = "CommandError";
    this.details = details;
  }
}

/**
 * Run a command and resolve with its stdout. Its stderr (and stdout, when `logFile` is given) is
 * written to `logFile` if set, otherwise stderr goes to our stderr. On a non-zero exit the last
 * lines of the log are printed and the promise rejects.
 *
 * @param {string} cmd
 * @param {string[]} args
 * @param {{cwd?: string, env?: Record<string, string|undefined>, logFile?: string, input?: string|Buffer, capture?: boolean}} [opts]
 * @returns {Promise<string>}
 */
export function run(cmd, args, opts = {}) {
  const capture = opts.capture ?? true;
  return new Promise((resolve, reject) => {
    const logStream = opts.logFile ? createWriteStream(opts.logFile, { flags: "a" }) : undefined;
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: opts.env ?? process.env,
      stdio: [opts.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    installSignalHandlers();
    running.add(child);
    child.on("exit", () => running.delete(child));
    const chunks = [];
    child.stdout.on("data", (chunk) => {
      if (capture) chunks.push(chunk);
      else if (logStream) logStream.write(chunk);
    });
    child.stderr.on("data", (chunk) => {
      if (logStream) logStream.write(chunk);
      else process.stderr.write(chunk);
    });
    if (opts.input !== undefined) child.stdin.end(opts.input);
    child.on("error", (err) => {
      logStream?.end();
      reject(
        new CommandError(
          `could not start ${cmd}: ${err.message}. Is it installed? (pi-sandbox image build checks the host tools first)`,
          {
            cmd,
            args,
          },
        ),
      );
    });
    child.on("close", (code, signal) => {
      const finish = async () => {
        if (logStream) await new Promise((r) => logStream.end(r));
        if (code === 0) return resolve(Buffer.concat(chunks).toString("utf8"));
        let tail = "";
        if (opts.logFile) {
          const text = await readFile(opts.logFile, "utf8").catch(() => "");
          tail = text.split("\n").slice(-40).join("\n");
          process.stderr.write(`--- last lines of ${opts.logFile} ---\n${tail}\n---\n`);
        }
        reject(
          new CommandError(`${cmd} ${args.join(" ")} failed (${signal ?? `exit ${code}`})`, {
            cmd,
            args,
            code,
            signal,
            tail,
          }),
        );
      };
      void finish();
    });
  });
}
