// The dashboard's gate, request by request: only a link's token starts a session, only this
// origin's Host is served, and nothing that changes state (or opens a socket) comes from another origin.
import { checkRequest, sessionCookie, type GuardContext, type GuardRequest } from "../src/dashboard/guard.js";
import { mintToken, verifyToken } from "../src/dashboard/tokens.js";

const key = "ab".repeat(32);
const port = 41234;
const context: GuardContext = { port, key, sessions: new Set(["s1"]) };
const cookie = `other=1; pi_sandbox_dashboard_${port}=s1`;

function req(overrides: Partial<GuardRequest> & { headers?: Record<string, string> }): GuardRequest {
  return { method: "GET", url: "/", ...overrides, headers: { host: `127.0.0.1:${port}`, ...overrides.headers } };
}

test("a link's token starts a session and redirects to the address without it", () => {
  const token = mintToken(key);
  expect(checkRequest(req({ url: `/?token=${token}` }), context)).toEqual({ kind: "login", location: "/" });
  expect(sessionCookie(port, "s2")).toBe(`pi_sandbox_dashboard_${port}=s2; Path=/; HttpOnly; SameSite=Strict`);
});

test("a token minted with another key, a changed one or none at all is refused", () => {
  const other = mintToken("cd".repeat(32));
  expect(verifyToken(key, other)).toBe(false);
  expect(checkRequest(req({ url: `/?token=${other}` }), context).kind).toBe("refuse");
  const token = mintToken(key);
  expect(checkRequest(req({ url: `/?token=${token}x` }), context).kind).toBe("refuse");
  expect(checkRequest(req({ url: "/" }), context).kind).toBe("refuse");
  expect(checkRequest(req({ url: "/api/state", headers: { cookie: "pi_sandbox_dashboard_1=s1" } }), context).kind).toBe(
    "refuse",
  );
});

test("a session cookie is enough to read, on 127.0.0.1 or localhost", () => {
  expect(checkRequest(req({ url: "/api/state", headers: { cookie } }), context)).toEqual({ kind: "allow" });
  const localhost = req({ url: "/api/state", headers: { cookie, host: `localhost:${port}` } });
  expect(checkRequest(localhost, context)).toEqual({ kind: "allow" });
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
  expect(post(`http://127.0.0.1:${port}`)).toEqual({ kind: "allow" });
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

test("a token is not taken by a POST or on another path", () => {
  const token = mintToken(key);
  const origin = `http://127.0.0.1:${port}`;
  expect(checkRequest(req({ method: "POST", url: `/?token=${token}`, headers: { origin } }), context).kind).toBe(
    "refuse",
  );
  expect(checkRequest(req({ url: `/api/state?token=${token}` }), context).kind).toBe("refuse");
});
