// One parked instance inside the waker: a plain TCP listener per preview on its leased host port,
// the connections they accepted held unread past their request's headers, then piped byte for byte
// to the instance's own gateway once its daemon listens again (or answered 503 when it could not).
import { connect, createServer, type Server, type Socket } from "node:net";
import { isAllowedHost } from "@pi-sandbox/ingress/host-guard";
import type { ParkedPreview } from "../state/waker-call.js";

/** Most connections held for one instance while it wakes; more are closed at once. */
const MAX_HELD = 256;
/** Most header bytes read from a held connection to find its Host; a longer head is refused. */
const MAX_HEAD_BYTES = 16 * 1024;
/** A held connection that sends no request for this long is closed (a browser's spare connection). */
const IDLE_HELD_MS = 120_000;

/** What a held instance tells the waker. */
export interface HeldInstanceHooks {
  /** A request came for the instance: wake it (called again for each further request; the waker dedupes). */
  wake(name: string): void;
  /** A pipe to the instance's gateway opened or closed (the waker stays while any is open). */
  piping(delta: 1 | -1): void;
  /** Log sink. */
  log(message: string): void;
}

/** A connection held for the instance: what it sent so far, and whether that holds a whole request head. */
interface Held {
  socket: Socket;
  hostPort: number;
  chunks: Buffer[];
  bytes: number;
  /** A request head with an accepted Host arrived: it is what wakes the instance. */
  asked: boolean;
}

/**
 * The listeners and held connections of one parked instance. A connection whose request head
 * names another Host than this preview's (`isAllowedHost`, the gateway's own DNS-rebinding guard)
 * is closed unanswered and wakes nothing, as the gateway's refused requests are no activity.
 */
export class HeldInstance {
  readonly #servers: Server[] = [];
  readonly #held = new Set<Held>();
  #listening = false;
  #onReleased!: (value: "released") => void;
  /** Resolves when the instance's daemon takes the previews back ({@link release}). */
  readonly released = new Promise<"released">((resolve) => (this.#onReleased = resolve));

  constructor(
    readonly name: string,
    readonly address: string,
    readonly previews: readonly ParkedPreview[],
    private readonly hooks: HeldInstanceHooks,
  ) {}

  /** Connections held now. */
  get waiting(): number {
    return this.#held.size;
  }

  /** Binds every preview's host port on the address; on any failure none stays bound. */
  async listen(): Promise<void> {
    try {
      for (const preview of this.previews) this.#servers.push(await this.#bind(preview.hostPort));
      this.#listening = true;
    } catch (error) {
      this.closeListeners();
      throw error;
    }
  }

  /** Its daemon takes the previews back: stops listening; the held connections wait for {@link pipeToGateway}. */
  release(): void {
    this.closeListeners();
    this.#onReleased("released");
  }

  /** Stops listening (the held connections stay); the ports are free when this returns. */
  closeListeners(): void {
    this.#listening = false;
    // Closing a listening handle closes its file descriptor at once: the daemon may bind next.
    for (const server of this.#servers.splice(0)) server.close();
  }

  /** Sends every held connection, and what it sent, to the same port of the instance's own gateway. */
  pipeToGateway(): void {
    for (const held of this.#take()) {
      const { socket } = held;
      const upstream = connect({ host: this.address, port: held.hostPort });
      this.hooks.piping(1);
      let closed = false;
      const close = () => {
        if (closed) return;
        closed = true;
        socket.destroy();
        upstream.destroy();
        this.hooks.piping(-1);
      };
      upstream.once("error", close);
      upstream.once("close", close);
      socket.once("error", close);
      socket.once("close", close);
      upstream.setNoDelay(true);
      for (const chunk of held.chunks) upstream.write(chunk);
      socket.pipe(upstream);
      upstream.pipe(socket);
      socket.resume();
    }
  }

  /**
   * Answers every held connection that sent a request with a plain 503 naming `reason`, and closes
   * the others; the listeners stay (the next request tries again) unless released.
   */
  answerUnavailable(reason: string): void {
    const body = `Preview of ${this.name} could not wake its instance: ${reason}. Reload to try again; if this stays, run pi-sandbox inspect ${this.name} and see its controller log.\n`;
    const answer =
      "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncache-control: no-store\r\n" +
      `connection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    for (const held of this.#take()) {
      if (held.asked) held.socket.end(answer);
      else held.socket.destroy();
    }
  }

  /** Closes the listeners and every held connection. */
  close(): void {
    this.closeListeners();
    for (const held of this.#take()) held.socket.destroy();
  }

  /** The held connections, no longer held here (their idle timers and readers removed). */
  #take(): Held[] {
    const all = [...this.#held];
    this.#held.clear();
    for (const { socket } of all) {
      socket.setTimeout(0);
      socket.removeAllListeners("data");
      socket.removeAllListeners("timeout");
      socket.pause();
    }
    return all;
  }

  #bind(port: number): Promise<Server> {
    const server = createServer((socket) => this.#accept(socket, port));
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host: this.address, port, exclusive: true }, () => {
        server.off("error", reject);
        server.on("error", (error) => this.hooks.log(`listener ${this.address}:${port}: ${error.message}`));
        resolve(server);
      });
    });
  }

  #accept(socket: Socket, hostPort: number): void {
    if (!this.#listening || this.#held.size >= MAX_HELD) {
      socket.destroy();
      return;
    }
    const held: Held = { socket, hostPort, chunks: [], bytes: 0, asked: false };
    this.#held.add(held);
    socket.on("error", () => undefined);
    socket.once("close", () => this.#held.delete(held));
    socket.setTimeout(IDLE_HELD_MS, () => {
      if (!held.asked) socket.destroy();
    });
    socket.on("data", (chunk: Buffer) => {
      held.chunks.push(chunk);
      held.bytes += chunk.length;
      if (held.asked) return;
      const head = Buffer.concat(held.chunks).subarray(0, MAX_HEAD_BYTES).toString("latin1");
      const end = head.indexOf("\r\n\r\n");
      if (end === -1 && held.bytes < MAX_HEAD_BYTES) return;
      const host = /\r\nhost:[ \t]*([^\r\n]*)/i.exec(end === -1 ? head : head.slice(0, end + 2))?.[1];
      if (end === -1 || !isAllowedHost(host?.trim(), hostPort, this.address)) {
        this.hooks.log(`refused a connection to ${this.address}:${hostPort}: not a request for this preview`);
        this.#held.delete(held);
        socket.destroy();
        return;
      }
      held.asked = true;
      // Read no further: the rest waits in the kernel until the connection goes to the gateway.
      socket.pause();
      this.hooks.wake(this.name);
    });
  }
}
