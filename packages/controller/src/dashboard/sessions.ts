// What the dashboard remembers of who it let in, in its own memory: the browser sessions it
// handed out (each dropped after hours unused) and the links already used (each forgotten once it
// has expired anyway). Nothing is written to disk: a restarted dashboard claims the state root with
// a new key (record.ts), so no link or session of the previous process is accepted again.
import { LINK_FUTURE_MS, LINK_TTL_MS, newSessionId } from "./tokens.js";

/**
 * How long a session may go without a request before it ends, in ms. A page left open keeps its
 * session (its event stream counts as use while it is open); a browser that was closed, or whose
 * cookie outlived the tab (session restore), needs a new link after this long.
 */
export const SESSION_IDLE_MS = 8 * 60 * 60_000;

interface Session {
  /** When the session last answered a request or ended a stream, in ms since the epoch. */
  lastUsedMs: number;
  /** Streams (server-sent events) open on it now. */
  streams: number;
}

/** The sessions the dashboard handed out; `has` is false for an unknown or an idle one. */
export class SessionTable {
  readonly #sessions = new Map<string, Session>();

  /** `now` gives the time in ms since the epoch (tests inject a clock); `idleMs` the idle bound. */
  constructor(
    private readonly now: () => number = Date.now,
    private readonly idleMs: number = SESSION_IDLE_MS,
  ) {}

  /** Starts a session and returns its id (the cookie's value). */
  create(): string {
    this.#prune();
    const id = newSessionId();
    this.#sessions.set(id, { lastUsedMs: this.now(), streams: 0 });
    return id;
  }

  /** Whether `id` is a session of this dashboard that is still in use; an idle one is dropped. */
  has(id: string): boolean {
    const session = this.#sessions.get(id);
    if (!session) return false;
    if (this.#idle(session)) {
      this.#sessions.delete(id);
      return false;
    }
    return true;
  }

  /** Records a request of session `id`. */
  touch(id: string): void {
    const session = this.#sessions.get(id);
    if (session) session.lastUsedMs = this.now();
  }

  /** Marks a stream of session `id` open; the returned function marks it closed (call it once). */
  holdStream(id: string): () => void {
    const session = this.#sessions.get(id);
    if (!session) return () => undefined;
    session.streams++;
    return () => {
      session.streams--;
      session.lastUsedMs = this.now();
    };
  }

  #idle(session: Session): boolean {
    return session.streams === 0 && this.now() - session.lastUsedMs > this.idleMs;
  }

  /** Forgets idle sessions, so sessions nobody comes back to do not pile up over the process's life. */
  #prune(): void {
    for (const [id, session] of this.#sessions) if (this.#idle(session)) this.#sessions.delete(id);
  }
}

/**
 * The nonces of links that opened a session. A nonce is kept only as long as its link could still
 * be accepted (its mint time plus {@link LINK_TTL_MS}): after that the link is refused as expired
 * anyway, so the memory holds at most the links used in the last ten minutes.
 */
export class UsedLinks {
  readonly #expiresAtMs = new Map<string, number>();

  /** `now` gives the time in ms since the epoch (tests inject a clock). */
  constructor(private readonly now: () => number = Date.now) {}

  /** Whether the link with `nonce` was used. */
  has(nonce: string): boolean {
    return this.#expiresAtMs.has(nonce);
  }

  /**
   * Remembers that the link with `nonce`, minted at `issuedAtMs`, was used. The server calls it in
   * the same turn of the event loop as the guard's check, so two requests racing with one link
   * cannot both pass.
   */
  add(nonce: string, issuedAtMs: number): void {
    const now = this.now();
    for (const [used, expiresAtMs] of this.#expiresAtMs) if (expiresAtMs < now) this.#expiresAtMs.delete(used);
    // Its link is refused as expired after issuedAtMs + LINK_TTL_MS; the extra minute keeps it
    // refused as used if the clock steps back that far after the nonce would have been forgotten.
    this.#expiresAtMs.set(nonce, issuedAtMs + LINK_TTL_MS + LINK_FUTURE_MS);
  }
}
