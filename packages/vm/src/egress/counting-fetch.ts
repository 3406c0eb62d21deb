// Bytes each way of the guest's HTTP(S) exchanges, counted on the host: a wrapper around the fetch
// Gondolin sends each request hop with. The request body is counted as the upstream reads it, the
// response body as the guest is handed it (after decoding and, with secrets, scrubbing); headers
// and framing are not counted. Both streams pass through chunk by chunk as they are pulled: nothing
// is buffered or copied. Each exchange is reported once, when it ends: its response body read to
// the end, cancelled (the guest went away, or Gondolin dropped a redirect's body) or failed, or its
// fetch rejected.
import { Response, type RequestInit } from "undici";

/** Where an exchange went and what it carried; never a header or body. */
export interface EgressBytes {
  /** The host name of the request's URL, lower case. */
  host: string;
  port: number;
  protocol: "http" | "https";
  method: string;
  /** Request body bytes read by the upstream. */
  bytesOut: number;
  /** Response body bytes handed to the guest. */
  bytesIn: number;
}

/** A fetch as Gondolin calls it. */
export type HopFetch = (input: string, init?: RequestInit) => Promise<Response>;

/** `inner`, with each exchange's bytes told to `report` (which must not throw or block). */
export function countingFetch(inner: HopFetch, report: (bytes: EgressBytes) => void): HopFetch {
  return async (input, init = {}) => {
    const url = new URL(input);
    const protocol = url.protocol === "https:" ? "https" : "http";
    const counts = { bytesOut: 0, bytesIn: 0 };
    let reported = false;
    const end = (): void => {
      if (reported) return;
      reported = true;
      report({
        host: url.hostname.toLowerCase(),
        port: Number(url.port || (protocol === "https" ? 443 : 80)),
        protocol,
        method: (init.method ?? "GET").toUpperCase(),
        ...counts,
      });
    };
    let body = init.body;
    if (body instanceof ReadableStream) {
      body = counted(body as ReadableStream<Uint8Array>, (n) => (counts.bytesOut += n));
    } else if (body instanceof Uint8Array) counts.bytesOut = body.byteLength;
    else if (typeof body === "string") counts.bytesOut = Buffer.byteLength(body);
    let response: Response;
    try {
      response = await inner(input, body === init.body ? init : { ...init, body });
    } catch (error) {
      end();
      throw error;
    }
    if (!response.body) {
      end();
      return response;
    }
    const guestBody = counted(response.body as ReadableStream<Uint8Array>, (n) => (counts.bytesIn += n), end);
    return new Response(guestBody, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}

/**
 * `source` as a stream that pulls one chunk at a time (no queue of its own), telling `add` each
 * chunk's size and `end` once: at its end, at a cancel (passed on to `source`) or at an error.
 */
function counted(
  source: ReadableStream<Uint8Array>,
  add: (bytes: number) => void,
  end: () => void = () => undefined,
): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let next: Awaited<ReturnType<typeof reader.read>>;
        try {
          next = await reader.read();
        } catch (error) {
          end();
          throw error;
        }
        if (next.done) {
          end();
          controller.close();
          return;
        }
        add(next.value.byteLength);
        controller.enqueue(next.value);
      },
      async cancel(reason) {
        end();
        await reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}
