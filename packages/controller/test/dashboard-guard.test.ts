// The dashboard's gate, request by request: only a link's token starts a session (once, within 10
// minutes of its minting, with a date nobody changed), only this origin's Host is served, and
// nothing that changes state (or opens a socket) comes from another origin.
import { createHmac } from "node:crypto";
import { checkRequest, sessionCookie, type GuardContext, type GuardRequest } from "../src/dashboard/guard.js";
import { checkToken, mintToken } from "../src/dashboard/tokens.js";

const key = "ab".repeat(32);
const port = 41234;
const nowMs = Date.UTC(2026, 0, 1, 12);
const context: GuardContext = { port, key, sessions: new Set(["s1"]), usedLinks: new Set(), nowMs };
const cookie = `other=1; pi_sandbox_dashboard_${port}=s1`;

function req(overrides: Partial<GuardRequest> & { headers?: Record<string, string> }): GuardRequest {
  return { method: "GET", url: "/", ...overrides, headers: { host: `127.0.0.1:${port}`, ...overrides.headers } };
}

test("a link's token starts a session and redirects to the address without it", () => {
  const token = mintToken(key, nowMs);
  const nonce = token.split(".")[0];
  expect(checkRequest(req({ url: `/?token=${token}` }), context)).toEqual({
    kind: "login",
    location: "/",
    link: { nonce, issuedAtMs: nowMs },
  });
});

test("the session cookie ends with the browser session: no Max-Age or Expires, HttpOnly, SameSite=Strict", () => {
  const cookie = sessionCookie(port, "s2");
  expect(cookie).toBe(`pi_sandbox_dashboard_${port}=s2; Path=/; HttpOnly; SameSite=Strict`);
  expect(cookie).not.toMatch(/max-age|expires|secure/i);
});

test("a token minted with another key, a changed one or none at all is refused", () => {
  const other = mintToken("cd".repeat(32), nowMs);
  expect(checkToken(key, other, nowMs)).toEqual({ ok: false, fault: "foreign" });
  expect(checkRequest(req({ url: `/?token=${other}` }), context).kind).toBe("refuse");
  const token = mintToken(key, nowMs);
  expect(checkRequest(req({ url: `/?token=${token}x` }), context).kind).toBe("refuse");
  expect(checkRequest(req({ url: "/" }), context).kind).toBe("refuse");
  expect(checkRequest(req({ url: "/api/state", headers: { cookie: "pi_sandbox_dashboard_1=s1" } }), context).kind).toBe(
    "refuse",
  );
});

test("a session cookie is enough to read, on 127.0.0.1 or localhost", () => {
  expect(checkRequest(req({ url: "/api/state", headers: { cookie } }), context)).toEqual({
    kind: "allow",
    session: "s1",
  });
  const localhost = req({ url: "/api/state", headers: { cookie, host: `localhost:${port}` } });
  expect(checkRequest(localhost, context)).toEqual({ kind: "allow", session: "s1" });
});

test("another Host (DNS rebinding, another port) is refused even with a session", () => {
  for (const host of ["evil.example:41234", "127.0.0.1:1", "127.0.0.2:41234", "127.0.0.1", ""]) {
    const verdict = checkRequest(req({ url: "/api/state", headers: { cookie, host } }), context);
    expect(verdict.kind).toBe("refuse");
  }
});

test("a change needs this origin's Origin: a foreign one, or none, is refused", () => {
  const post = (origin?: string) =>
    checkRequest(
      req({ method: "POST", url: "/api/action", headers: { cookie, ...(origin ? { origin } : {}) } }),
      context,
    );
  expect(post(`http://127.0.0.1:${port}`)).toEqual({ kind: "allow", session: "s1" });
  expect(post("http://127.0.0.9:41000").kind).toBe("refuse");
  expect(post("null").kind).toBe("refuse");
  expect(post(`http://localhost:${port}`).kind).toBe("refuse");
  expect(post().kind).toBe("refuse");
});

test("a read from a foreign Origin and an upgrade from any other origin are refused", () => {
  const foreign = { cookie, origin: "http://127.0.0.9:41000" };
  expect(checkRequest(req({ url: "/api/state", headers: foreign }), context).kind).toBe("refuse");
  expect(checkRequest(req({ url: "/", upgrade: true, headers: foreign }), context).kind).toBe("refuse");
  expect(checkRequest(req({ url: "/", upgrade: true, headers: { cookie } }), context).kind).toBe("refuse");
});

test("a token is not taken by a POST, a HEAD or on another path", () => {
  const token = mintToken(key, nowMs);
  const origin = `http://127.0.0.1:${port}`;
  expect(checkRequest(req({ method: "POST", url: `/?token=${token}`, headers: { origin } }), context).kind).toBe(
    "refuse",
  );
  expect(checkRequest(req({ url: `/api/state?token=${token}` }), context).kind).toBe("refuse");
  expect(checkRequest(req({ method: "HEAD", url: `/?token=${token}` }), context).kind).toBe("refuse");
});

test("a link already used is refused, saying so and how to get a new one", () => {
  const token = mintToken(key, nowMs);
  const used = { ...context, usedLinks: new Set([token.split(".")[0]!]) };
  const verdict = checkRequest(req({ url: `/?token=${token}` }), used);
  expect(verdict).toMatchObject({ kind: "refuse", reason: expect.stringMatching(/already used/) });
  expect(verdict.kind === "refuse" && verdict.hint).toMatch(/pi-sandbox dashboard/);
});

test("a link opens a session until 10 minutes after its minting, and is refused as expired after", () => {
  const token = mintToken(key, nowMs);
  const at = (ms: number) => checkRequest(req({ url: `/?token=${token}` }), { ...context, nowMs: ms });
  expect(at(nowMs + 10 * 60_000).kind).toBe("login");
  const expired = at(nowMs + 10 * 60_000 + 1);
  expect(expired).toMatchObject({ kind: "refuse", reason: expect.stringMatching(/expired/) });
  expect(expired.kind === "refuse" && expired.hint).toMatch(/pi-sandbox dashboard .*within 10 minutes/);
});

test("a link dated more than a minute ahead is refused; one a little ahead (a clock step) opens", () => {
  expect(checkToken(key, mintToken(key, nowMs + 60_000), nowMs).ok).toBe(true);
  expect(checkToken(key, mintToken(key, nowMs + 60_001), nowMs)).toEqual({ ok: false, fault: "future" });
  const verdict = checkRequest(req({ url: `/?token=${mintToken(key, nowMs + 3_600_000)}` }), context);
  expect(verdict).toMatchObject({ kind: "refuse", reason: expect.stringMatching(/future/) });
});

test("a link whose date was changed by hand is refused: the date is under the MAC", () => {
  const [payload, mac] = mintToken(key, nowMs - 11 * 60_000).split(".") as [string, string];
  const bytes = Buffer.from(payload, "base64url");
  expect(bytes.readUIntBE(0, 6)).toBe(nowMs - 11 * 60_000);
  bytes.writeUIntBE(nowMs, 0, 6);
  const redated = `${bytes.toString("base64url")}.${mac}`;
  expect(checkToken(key, redated, nowMs)).toEqual({ ok: false, fault: "foreign" });
  expect(checkRequest(req({ url: `/?token=${redated}` }), context).kind).toBe("refuse");
});

test("a signed link without a date (an older release's) is refused as expired", () => {
  const nonce = Buffer.alloc(16, 7).toString("base64url");
  const mac = createHmac("sha256", Buffer.from(key, "hex")).update(nonce).digest("base64url");
  expect(checkToken(key, `${nonce}.${mac}`, nowMs)).toEqual({ ok: false, fault: "expired" });
});
