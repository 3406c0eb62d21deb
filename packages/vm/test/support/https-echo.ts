// A host-side fake API over HTTPS for the secret tests: a fresh self-signed certificate (made with
// the host's openssl) for the given names, and a server that answers every request with what it
// received (method, URL, headers, body) as JSON, so a test sees exactly what reached "the API".
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import https from "node:https";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";

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

/** A self-signed certificate and key (PEM) for `names`. */
export function selfSignedCert(names: readonly string[]): { cert: string; key: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pisb-cert-"));
  try {
    const [cert, key] = [path.join(dir, "cert.pem"), path.join(dir, "key.pem")];
    execFileSync(
      "openssl",
      [
        ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", key, "-out", cert],
        ...["-subj", `/CN=${names[0]}`, "-addext", `subjectAltName=${names.map((n) => `DNS:${n}`).join(",")}`],
      ],
      { stdio: "ignore" },
    );
    return { cert: fs.readFileSync(cert, "utf8"), key: fs.readFileSync(key, "utf8") };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
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
