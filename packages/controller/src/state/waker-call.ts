// The calling side of the waker's Unix socket (waker/): the messages a daemon sends to hand a parked
// instance's previews over and take them back, and the ping that tells inspect who is parked.
import { access } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import type { PreviewLink } from "@pi-sandbox/ingress";
import { assertOwnListener } from "./daemon-call.js";
import type { StateLayout } from "./layout.js";
import { readStatus } from "./records.js";
import { readJsonLines } from "../wire.js";

/** One preview the waker holds for a parked instance: its leased host port and where it led in the guest. */
export interface ParkedPreview {
  /** Preview key (service name, or `port-N`). */
  key: string;
  /** The host port it listens on (its lease in ports.json). */
  hostPort: number;
  /** The guest port its requests went to before the suspend. */
  guestPort: number;
  /** Its links, as the gateway had them (the waker keeps them for the daemon that takes the preview back). */
  links: PreviewLink[];
}

/** What a daemon (or inspect) asks the waker. */
export type WakerRequest =
  | { id: number; type: "ping" }
  /** Listen on `address` at each preview's host port for instance `name`, whose daemon exits next. */
  | { id: number; type: "hold"; name: string; address: string; previews: ParkedPreview[] }
  /** Close `name`'s listeners now (its new daemon binds them next); the connections they hold wait. */
  | { id: number; type: "release"; name: string }
  /** After a release on the same connection: the daemon listens again (the waiting connections go to it) or will not. */
  | { id: number; type: "taken"; name: string; listening: boolean };

/** What the waker answers. */
export type WakerReply =
  | { id: number; type: "pong"; pid: number; held: string[] }
  | { id: number; type: "held" }
  | { id: number; type: "released"; held: false }
  | {
      id: number;
      type: "released";
      held: true;
      address: string;
      previews: ParkedPreview[];
      /** Connections the waker accepted for the instance, handed to its daemon after `taken`. */
      waiting: number;
    }
  | { id: number; type: "ok" }
  | { id: number; type: "error"; message: string };

/** A request without its id (the link numbers them). */
type Outgoing<T = WakerRequest> = T extends { id: number } ? Omit<T, "id"> : never;

/**
 * One connection to the waker. Requests are answered in order, each within its deadline; the
 * connection stays open between them, because a release and its `taken` must share it (the waker
 * answers the waiting connections 503 when the connection closes between the two).
 */
export class WakerLink {
  readonly #socket: Socket;
  readonly #waiting = new Map<number, (reply: WakerReply | Error) => void>();
  #next = 1;
  #closed: Error | undefined;

  private constructor(socket: Socket) {
    this.#socket = socket;
    readJsonLines<WakerReply>(socket, (reply) => {
      const settle = this.#waiting.get(reply.id);
      this.#waiting.delete(reply.id);
      settle?.(reply);
    });
    const gone = (error?: Error) => {
      this.#closed ??= error ?? new Error("the waker closed the connection");
      for (const settle of this.#waiting.values()) settle(this.#closed);
      this.#waiting.clear();
    };
    socket.on("error", gone);
    socket.on("close", () => gone());
  }

  /**
   * A link to the waker of `layout`'s state root, or undefined when none listens. Throws
   * CONTROLLER_STATE_INSECURE when the socket or its directory is not this user's own (nothing is
   * sent then), as for a daemon's socket.
   */
  static async open(layout: StateLayout, timeoutMs = 2000): Promise<WakerLink | undefined> {
    const path = layout.wakerSocketPath();
    if (
      !(await access(path).then(
        () => true,
        () => false,
      ))
    )
      return undefined;
    const socket = await new Promise<Socket | undefined>((resolve) => {
      const s = connect(path);
      const timer = setTimeout(() => {
        s.destroy();
        resolve(undefined);
      }, timeoutMs);
      s.once("connect", () => {
        clearTimeout(timer);
        resolve(s);
      });
      s.once("error", () => {
        clearTimeout(timer);
        resolve(undefined);
      });
    });
    if (!socket) return undefined;
    try {
      await assertOwnListener(path);
    } catch (error) {
      socket.destroy();
      throw error;
    }
    return new WakerLink(socket);
  }

  /** Sends one request; its answer, or an Error (the connection closed, or no answer within `timeoutMs`). */
  request(message: Outgoing, timeoutMs = 10_000): Promise<WakerReply> {
    if (this.#closed) return Promise.reject(this.#closed);
    const id = this.#next++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(id);
        reject(new Error(`the waker did not answer ${message.type} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiting.set(id, (reply) => {
        clearTimeout(timer);
        if (reply instanceof Error) reject(reply);
        else if (reply.type === "error") reject(new Error(`the waker refused ${message.type}: ${reply.message}`));
        else resolve(reply);
      });
      if (!this.#socket.destroyed) this.#socket.write(`${JSON.stringify({ ...message, id })}\n`);
    });
  }

  /** Ends the connection. */
  close(): void {
    this.#socket.end();
    this.#socket.destroy();
  }
}

/** The names of the instances the waker holds now (empty when no waker runs or it does not answer). */
export async function wakerHolding(layout: StateLayout): Promise<ReadonlySet<string>> {
  const link = await WakerLink.open(layout).catch(() => undefined);
  if (!link) return new Set();
  try {
    const reply = await link.request({ type: "ping" }, 2000);
    return new Set(reply.type === "pong" ? reply.held : []);
  } catch {
    return new Set();
  } finally {
    link.close();
  }
}

/**
 * True when instance `name` suspended itself and its daemon may have parked it (status.json says
 * `suspended` by `idle`): an action on it then needs a daemon spawned, as a start does.
 */
export async function suspendedByIdle(layout: StateLayout, name: string): Promise<boolean> {
  const status = await readStatus(layout, "instances", name).catch(() => undefined);
  return status?.state === "suspended" && status.suspendedBy === "idle";
}
