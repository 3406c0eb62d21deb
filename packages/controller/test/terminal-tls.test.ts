// The profile that gives a terminal the VM's CA variables, written and then read by the host's
// /bin/sh standing in for the guest's: what the writing exec's environment holds reaches a login
// with an empty environment, odd values are left out, and Node falls back to the system bundle.
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tlsProfileScript } from "../src/daemon/terminal-tls.js";

const SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";
let dir: string;
/** What the fallback line gives Node on this host: the system bundle where it exists. */
let fallback: string;

beforeAll(async () => {
  fallback = await stat(SYSTEM_BUNDLE).then(
    () => SYSTEM_BUNDLE,
    () => "",
  );
});

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "pisb-tls-"));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs the writing script with exactly `env`; returns the profile's path. */
function write(env: Record<string, string>): string {
  const target = join(dir, "profile.d", "pi-sandbox-tls.sh");
  execFileSync("/bin/sh", ["-c", tlsProfileScript(target)], { env: { PATH: "/usr/bin:/bin", ...env } });
  return target;
}

/** What a login shell with an empty environment (plus `env`) sees after reading the profile. */
function login(profile: string, env: Record<string, string> = {}): string {
  return execFileSync(
    "/bin/sh",
    [
      "-c",
      `. '${profile}'; printf '%s|%s|%s|%s' "$NODE_EXTRA_CA_CERTS" "$SSL_CERT_FILE" "$CURL_CA_BUNDLE" "$REQUESTS_CA_BUNDLE"`,
    ],
    { env, encoding: "utf8" },
  );
}

test("a login with an empty environment gets the CA variables the writing exec had", async () => {
  const profile = write({
    NODE_EXTRA_CA_CERTS: "/etc/gondolin/mitm/ca.crt",
    SSL_CERT_FILE: "/run/gondolin/ca-certificates.crt",
    CURL_CA_BUNDLE: "/run/gondolin/ca-certificates.crt",
    REQUESTS_CA_BUNDLE: "/run/gondolin/ca-certificates.crt",
  });
  expect(login(profile)).toBe(
    "/etc/gondolin/mitm/ca.crt|/run/gondolin/ca-certificates.crt|/run/gondolin/ca-certificates.crt|/run/gondolin/ca-certificates.crt",
  );
  expect((await stat(profile)).mode & 0o777).toBe(0o644);
  expect(await readFile(profile, "utf8")).toMatch(/^# Written by pi-sandbox/);
});

test("a value that is not a plain absolute path is left out instead of quoted", async () => {
  const profile = write({
    NODE_EXTRA_CA_CERTS: "/tmp/x'; touch /tmp/pwned; '",
    SSL_CERT_FILE: "relative/ca.crt",
    CURL_CA_BUNDLE: "/ok/bundle.crt",
  });
  const text = await readFile(profile, "utf8");
  expect(text).not.toContain("pwned");
  expect(text).not.toContain("relative");
  expect(login(profile)).toBe(`${fallback}||/ok/bundle.crt|`); // Node's own falls back
});

test("a variable the terminal already has is kept", () => {
  const profile = write({ NODE_EXTRA_CA_CERTS: "/vm/ca.crt" });
  expect(login(profile, { NODE_EXTRA_CA_CERTS: "/mine.crt" })).toBe("/mine.crt|||");
});

test("without a file named for Node, the line for the system bundle applies only where that bundle exists", async () => {
  const profile = write({});
  const text = await readFile(profile, "utf8");
  expect(text).toContain(
    '[ -n "${NODE_EXTRA_CA_CERTS:-}" ] || [ ! -r /etc/ssl/certs/ca-certificates.crt ] || export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt',
  );
  expect(login(profile)).toBe(`${fallback}|||`);
});

test("writing again replaces the profile", async () => {
  write({ NODE_EXTRA_CA_CERTS: "/first.crt" });
  const profile = write({ NODE_EXTRA_CA_CERTS: "/second.crt" });
  expect(login(profile)).toBe("/second.crt|||");
  expect(await readFile(profile, "utf8")).not.toContain("/first.crt");
});
