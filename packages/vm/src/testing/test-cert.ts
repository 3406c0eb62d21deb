// Test support (exported only from `@pi-sandbox/vm/testing`, never from the package's root): a
// fresh self-signed certificate for host-side fake HTTPS APIs, made with the host's openssl. A
// test serves with it and passes it as the CA of `StartVmOptions.upstream`, so the host's secret
// fetch trusts that fake and no other certificate changes.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

/** A self-signed certificate and its unencrypted key (PEM), valid two days for `names` (CN = the first). */
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
