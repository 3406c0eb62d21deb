// A host-side fake API over HTTPS for the secret tests: a fresh self-signed certificate for the
// given names (`selfSignedCert` of the testing entry), and a server that answers every request
// with what it received (method, URL, headers, body) as JSON, so a test sees exactly what reached
// "the API".
import https from "node:https";
import type { AddressInfo } from "node:net";
import { selfSignedCert } from "../../src/testing.js";

/** One request as the fake API received it. */
export interface Received {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A running fake API: its port, its certificate (PEM, to trust), what it received, close. */
export interface HttpsEcho {
  port: number;
  ca: string;
  received: Received[];
  close(): Promise<void>;
}

/** Starts the echo server on 127.0.0.1; `answer` may replace the JSON echo for some requests. */
export async function httpsEcho(
  names: readonly string[],
  answer?: (request: Received, response: import("node:http").ServerResponse) => boolean,
): Promise<HttpsEcho> {
  const { cert, key } = selfSignedCert(names);
  const received: Received[] = [];
  const server = https.createServer({ cert, key }, (request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const seen = {
        method: request.method ?? "",
        url: request.url ?? "",
        headers: request.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      received.push(seen);
      if (answer?.(seen, response)) return;
      response.writeHead(200, {
        "content-type": "application/json",
        "x-echo-authorization": String(seen.headers.authorization),
      });
      response.end(JSON.stringify(seen));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    ca: cert,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
