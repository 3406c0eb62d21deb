// Port leases of an instance's previews, kept in one JSON file so a reopened instance gets the
// same origins.
import { readFile } from "node:fs/promises";
import path from "node:path";
import { writeJsonAtomic } from "@pi-sandbox/config";
import { IngressError } from "./errors.js";
import { isLoopbackV4 } from "./host-guard.js";

/**
 * Where host ports of previews are remembered, by preview key. The controller keeps them in the
 * instance's state so a reopened instance gets the same origins.
 */
export interface PortLeaseStore {
  /** The host port leased to `key`, if any. */
  get(key: string): Promise<number | undefined>;
  /** Records (or replaces) the lease of `key`. Durable when the promise resolves. */
  set(key: string, port: number): Promise<void>;
  /** Forgets the lease of `key`; no-op when absent. */
  delete(key: string): Promise<void>;
  /** Every lease, so a new lease never reuses a port that belongs to another key. */
  entries(): Promise<Record<string, number>>;
}

/** A store that lives only as long as the process; for tests and throwaway gateways. */
export class MemoryPortLeaseStore implements PortLeaseStore {
  readonly #leases = new Map<string, number>();

  constructor(initial: Record<string, number> = {}) {
    for (const [key, port] of Object.entries(initial)) this.#leases.set(key, port);
  }

  async get(key: string): Promise<number | undefined> {
    return this.#leases.get(key);
  }

  async set(key: string, port: number): Promise<void> {
    this.#leases.set(key, port);
  }

  async delete(key: string): Promise<void> {
    this.#leases.delete(key);
  }

  async entries(): Promise<Record<string, number>> {
    return Object.fromEntries(this.#leases);
  }
}

interface LeaseFile {
  version: 1;
  /** The loopback address the previews bind; absent in files written before it existed. */
  address?: string;
  leases: Record<string, number>;
}

/** What one read of the file holds. */
interface LeaseState {
  address: string | undefined;
  leases: Record<string, number>;
}

/**
 * Leases kept in one JSON file (`{"version":1,"address":"127.4.5.6","leases":{"web":41231}}`),
 * rewritten atomically: temp file, fsync, rename over the old file, fsync the directory. The file
 * also remembers the loopback address of the previews ({@link address}); a file without one
 * (written before addresses existed) reads as having none. Writes from this object are
 * serialised; two objects (or processes) writing the same file at once are not supported.
 */
export class JsonFilePortLeaseStore implements PortLeaseStore {
  /** Absolute path of the JSON file. */
  readonly path: string;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(filePath: string) {
    this.path = path.resolve(filePath);
  }

  async get(key: string): Promise<number | undefined> {
    const { leases } = await this.#serial(() => this.#read());
    return leases[key];
  }

  async entries(): Promise<Record<string, number>> {
    return { ...(await this.#serial(() => this.#read())).leases };
  }

  /** The loopback address recorded with the leases, or undefined when none is. */
  async address(): Promise<string | undefined> {
    return (await this.#serial(() => this.#read())).address;
  }

  /** Records the loopback address of the previews (kept with the leases). Durable when the promise resolves. */
  async setAddress(address: string): Promise<void> {
    if (!isLoopbackV4(address)) {
      throw new IngressError(
        "INGRESS_LEASE_STORE_FAILED",
        `cannot record address ${JSON.stringify(address)}: not an IPv4 loopback address`,
        { details: { address, path: this.path } },
      );
    }
    await this.#serial(async () => {
      const state = await this.#read();
      if (state.address === address) return;
      await this.#write({ ...state, address });
    });
  }

  async set(key: string, port: number): Promise<void> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new IngressError(
        "INGRESS_LEASE_STORE_FAILED",
        `cannot lease port ${port} for preview ${key}: not a TCP port`,
        {
          details: { key, port, path: this.path },
        },
      );
    }
    await this.#serial(async () => {
      const state = await this.#read();
      if (state.leases[key] === port) return;
      await this.#write({ ...state, leases: { ...state.leases, [key]: port } });
    });
  }

  async delete(key: string): Promise<void> {
    await this.#serial(async () => {
      const state = await this.#read();
      if (!(key in state.leases)) return;
      const rest = { ...state.leases };
      delete rest[key];
      await this.#write({ ...state, leases: rest });
    });
  }

  // Reads and read-modify-writes run one at a time so concurrent `set`s of different keys do not
  // overwrite each other.
  #serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(task, task);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #read(): Promise<LeaseState> {
    let text: string;
    try {
      text = await readFile(this.path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return { address: undefined, leases: {} };
      throw this.#failure(`cannot read the port lease file ${this.path}`, error);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      throw this.#failure(`the port lease file ${this.path} is not valid JSON`, error);
    }
    const file = parsed as Partial<LeaseFile> | null;
    const leases = file?.leases;
    if (typeof leases !== "object" || leases === null || Array.isArray(leases)) {
      throw this.#failure(`the port lease file ${this.path} has no "leases" object`);
    }
    const result: Record<string, number> = {};
    // Tolerant: a file this program wrote itself; entries that are not ports are dropped.
    for (const [key, port] of Object.entries(leases)) {
      if (Number.isInteger(port) && (port as number) >= 1 && (port as number) <= 65535) result[key] = port as number;
    }
    const address = typeof file?.address === "string" && isLoopbackV4(file.address) ? file.address : undefined;
    return { address, leases: result };
  }

  async #write(state: LeaseState): Promise<void> {
    const body: LeaseFile = {
      version: 1,
      ...(state.address === undefined ? {} : { address: state.address }),
      leases: state.leases,
    };
    try {
      await writeJsonAtomic(this.path, body);
    } catch (error) {
      throw this.#failure(`cannot write the port lease file ${this.path}`, error);
    }
  }

  #failure(what: string, cause?: unknown): IngressError {
    const reason = cause instanceof Error ? `: ${cause.message}` : "";
    return new IngressError("INGRESS_LEASE_STORE_FAILED", `${what}${reason}`, {
      hint: "fix or remove the file (removing it assigns new preview ports)",
      cause,
      details: { path: this.path },
    });
  }
}
