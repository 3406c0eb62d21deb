// The host side of a live-mode VM test: a fake HTTPS provider under its public name (this
// process's `dns.lookup` sends that name to 127.0.0.1), and the instance's controller in-process
// with the name as an allowed internal host and the runtime's `upstream` seam, which trusts the
// fake's self-signed certificate and dials its port for the guest's HTTPS to port 443.
import dns from "node:dns";
import { mkdir, readFile, readdir, writeFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import https from "node:https";
import net from "node:net";
import { join } from "node:path";
import {
  StateLayout,
  callAction,
  findAction,
  validateAction,
  type CallActionOptions,
} from "@pi-sandbox/controller/client";
import { InstanceController, createFileLogger, createVmRuntime, selfSignedCert } from "@pi-sandbox/controller/testing";

/** What a live test drives: actions to its instance, and a byte search of the state root. */
export interface LiveHost {
  /** The state root's layout. */
  layout: StateLayout;
  /** Local actions (inspect) through the client, which reads the state root; every other to the in-process controller, validated as the daemon validates it. */
  call(input: unknown, options?: CallActionOptions): Promise<unknown>;
  /** `call` of an action on the test's instance, its result as loose JSON. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- results are loose JSON in tests
  act(action: Record<string, unknown>): Promise<any>;
  /** Every file under the state root (disk layers, records, logs), with the `needles` found in it. */
  searchState(needles: readonly string[]): Promise<{ path: string; found: string[]; bytes: Buffer }[]>;
  close(): void;
}

/** Options of {@link startLiveHost}. */
export interface LiveHostOptions {
  /** Temp directory: the state root goes in `<dir>/state`, and the client's cwd is `dir`. */
  dir: string;
  /** The instance's name. */
  name: string;
  /** The provider's public host name (`api.anthropic.com`). */
  api: string;
  /** The fake provider. */
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  /** WebSocket (or other) upgrade requests to the fake provider. */
  onUpgrade?: (req: IncomingMessage, socket: net.Socket) => void;
}

const originalLookup = dns.lookup;

/** Starts the fake provider and the instance's in-process controller (see the file's header). */
export async function startLiveHost(options: LiveHostOptions): Promise<LiveHost> {
  const { dir, name, api } = options;
  const tls = selfSignedCert([api]);
  const server = https.createServer(tls, options.handler);
  if (options.onUpgrade) server.on("upgrade", options.onUpgrade);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  (dns as { lookup: unknown }).lookup = (
    hostname: string,
    lookupOptions: unknown,
    callback?: (...args: unknown[]) => void,
  ): void => {
    if (hostname !== api) {
      (originalLookup as (...args: unknown[]) => void)(hostname, lookupOptions, callback);
      return;
    }
    const done = (typeof lookupOptions === "function" ? lookupOptions : callback) as (...args: unknown[]) => void;
    const all = typeof lookupOptions === "object" && (lookupOptions as { all?: boolean } | null)?.all === true;
    if (all) process.nextTick(done, null, [{ address: "127.0.0.1", family: 4 }]);
    else process.nextTick(done, null, "127.0.0.1", 4);
  };

  const layout = new StateLayout(join(dir, "state"));
  await layout.ensurePrivate();
  const ping = await servePing(layout, name);
  const newController = () =>
    new InstanceController(
      layout,
      "instances",
      name,
      createFileLogger(layout.logFile("instances", name), `[${name}]`),
      createVmRuntime({
        stateRoot: layout.runtimeDir(),
        agentSeeds: layout.agentSeedsDir(),
        allowedInternalHosts: [api],
        upstream: { ca: tls.cert, httpsPort: port },
      }),
    );
  let controller = newController();

  async function call(input: unknown, callOptions?: CallActionOptions): Promise<unknown> {
    const { args } = validateAction(input);
    if (findAction(args.action)?.route === "local") {
      return callAction(input, { ...callOptions, env: { ...process.env, PI_SANDBOX_HOME: layout.root }, cwd: dir });
    }
    // A suspend ends the daemon; the next action (the start) goes to a fresh one, as a spawn would.
    if (controller.exiting) controller = newController();
    return controller.call(args, {
      progress: (event) => callOptions?.onProgress?.(event),
      ...(callOptions?.signal ? { signal: callOptions.signal } : {}),
    });
  }

  return {
    layout,
    call,
    act: (action) => call({ name, ...action }),
    async searchState(needles) {
      const files = (await readdir(layout.root, { recursive: true, withFileTypes: true })).filter((f) => f.isFile());
      const results = [];
      for (const file of files) {
        const path = join(file.parentPath, file.name);
        const bytes = await readFile(path).catch(() => undefined);
        if (bytes) results.push({ path, found: needles.filter((needle) => bytes.includes(needle)), bytes });
      }
      return results;
    },
    close() {
      (dns as { lookup: unknown }).lookup = originalLookup;
      server.close();
      ping.close();
    },
  };
}

/** inspect judges the daemon live by its pid file and a socket that answers pings: both, for this process. */
async function servePing(layout: StateLayout, name: string): Promise<net.Server> {
  await mkdir(layout.entryDir("instances", name), { recursive: true, mode: 0o700 });
  await writeFile(layout.pidFile("instances", name), `${process.pid}\n`);
  const ping = net.createServer((socket) => {
    socket.on("data", (chunk) => {
      for (const line of chunk.toString().split("\n").filter(Boolean)) {
        const message = JSON.parse(line) as { id: number };
        socket.write(`${JSON.stringify({ id: message.id, type: "pong", pid: process.pid, state: "running" })}\n`);
      }
    });
    socket.on("error", () => undefined);
  });
  await new Promise<void>((resolve) => ping.listen(layout.socketPath("instances", name), resolve));
  return ping;
}
