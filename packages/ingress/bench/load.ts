// The benchmark's load generator: closed-loop keep-alive clients against one origin for a fixed
// time, counted into requests/s, p50/p99 latency and throughput.
import { performance } from "node:perf_hooks";
import { Pool } from "undici";

/** One measured scenario. */
export interface LoadResult {
  requests: number;
  errors: number;
  seconds: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  bytesPerSecond: number;
}

/** Options of {@link runLoad}. */
export interface LoadOptions {
  /** Origin to load, e.g. `http://127.0.0.1:41231`. */
  origin: string;
  /** Request path. */
  path: string;
  /** Requests in flight at once (one keep-alive client connection each). */
  concurrency: number;
  /** How long to measure, after a short warm-up. */
  seconds: number;
  /** Optional request body (sent as POST). */
  body?: Buffer;
}

/** Closed-loop load: `concurrency` workers each send the next request when the previous finished. */
export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const pool = new Pool(options.origin, { connections: options.concurrency, pipelining: 1 });
  const latencies: number[] = [];
  let errors = 0;
  let bytes = 0;
  const one = async (record: boolean) => {
    const started = performance.now();
    try {
      const res = await pool.request({
        method: options.body ? "POST" : "GET",
        path: options.path,
        body: options.body,
      });
      for await (const chunk of res.body) bytes += record ? (chunk as Buffer).length : 0;
      if (record) latencies.push(performance.now() - started);
    } catch {
      if (record) errors++;
    }
  };
  try {
    // Warm-up: open connections and let JITs settle.
    const warmUntil = performance.now() + 500;
    await Promise.all(
      Array.from({ length: options.concurrency }, async () => {
        while (performance.now() < warmUntil) await one(false);
      }),
    );
    const started = performance.now();
    const until = started + options.seconds * 1000;
    await Promise.all(
      Array.from({ length: options.concurrency }, async () => {
        while (performance.now() < until) await one(true);
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    latencies.sort((a, b) => a - b);
    const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN;
    return {
      requests: latencies.length,
      errors,
      seconds,
      perSecond: latencies.length / seconds,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      bytesPerSecond: bytes / seconds,
    };
  } finally {
    await pool.destroy();
  }
}
