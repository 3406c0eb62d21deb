// The host's Pi login as live mode reads it: an API key as is, an OAuth token without its refresh
// token (refreshed on the host through Pi's SDK when about to expire), and unusable logins refused.
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hostAgentDir, REFRESH_BELOW_MS, resolveHostCredential } from "../src/credentials.js";
import { refreshHostLoginWithPi, type PiLoginOptions } from "../src/pi-login.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "auth-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const NOW = 1_800_000_000_000;
const env = () => ({ PI_CODING_AGENT_DIR: dir });
const auth = (data: unknown) => writeFile(join(dir, "auth.json"), JSON.stringify(data));

test("the host agent dir is PI_CODING_AGENT_DIR, else ~/.pi/agent", () => {
  expect(hostAgentDir({ PI_CODING_AGENT_DIR: "/x" })).toBe("/x");
  expect(hostAgentDir({ HOME: "/home/u" })).toBe("/home/u/.pi/agent");
});

test("an OAuth login yields the access token and expiry, never the refresh token", async () => {
  await auth({ p: { type: "oauth", access: "A", refresh: "R", expires: NOW + 3_600_000, accountId: "acct" } });
  const credential = await resolveHostCredential("p", { env: env(), now: NOW });
  expect(credential).toEqual({
    provider: "p",
    kind: "oauth",
    value: "A",
    expiresAt: NOW + 3_600_000,
    refreshed: false,
  });
  expect(JSON.stringify(credential)).not.toContain('"R"');
});

test("accept sees the stored kind before any refresh and can refuse it", async () => {
  await auth({ p: { type: "oauth", access: "OLD", refresh: "R", expires: NOW - 1000 } });
  const refused = new Error("refused");
  let refreshed = false;
  const seen: string[] = [];
  await expect(
    resolveHostCredential("p", {
      env: env(),
      now: NOW,
      refreshLogin: async () => void (refreshed = true),
      accept: (kind) => {
        seen.push(kind);
        throw refused;
      },
    }),
  ).rejects.toBe(refused);
  expect({ seen, refreshed }).toEqual({ seen: ["oauth"], refreshed: false });
});

test("an API key is passed as is, without expiry", async () => {
  await auth({ p: { type: "api_key", key: "K" } });
  expect(await resolveHostCredential("p", { env: env(), now: NOW })).toEqual({
    provider: "p",
    kind: "api_key",
    value: "K",
    expiresAt: undefined,
    refreshed: false,
  });
});

test.each([
  ["no auth.json", undefined, "REVIEW_SETUP_LOGIN_MISSING", "does not exist"],
  ["no entry", { other: { type: "api_key", key: "K" } }, "REVIEW_SETUP_LOGIN_MISSING", "no credential for p"],
  [
    "an expired token of a provider Pi cannot refresh",
    { p: { type: "oauth", access: "A", refresh: "R", expires: Date.now() - 1 } },
    "REVIEW_SETUP_TOKEN_UNUSABLE",
    "Pi has no built-in OAuth refresh for p",
  ],
  ["a key command", { p: { type: "api_key", key: "!op read x" } }, "REVIEW_SETUP_TOKEN_UNUSABLE", "command"],
  ["an unknown shape", { p: { type: "weird" } }, "REVIEW_SETUP_TOKEN_UNUSABLE", "unknown shape"],
])("%s is refused with a hint", async (_label, data, code, text) => {
  if (data !== undefined) await auth(data);
  const error = await resolveHostCredential("p", { env: env(), now: NOW }).catch((e: unknown) => e);
  expect(error).toMatchObject({ code, message: expect.stringContaining(text), hint: expect.any(String) });
  expect((error as Error).message).not.toContain('"A"');
});

describe("an expiring OAuth login is refreshed on the host through Pi's SDK (fixture provider)", () => {
  // A provider registered next to Pi's built-in ones; its refresh stands in for the provider's
  // token endpoint. Pi's ModelRuntime runs it under auth.json's lock and writes the result.
  function fixture(refresh: (c: Record<string, unknown>) => Promise<Record<string, unknown>>) {
    const calls: string[] = [];
    const provider = {
      id: "fx",
      name: "Fixture",
      getModels: () => [],
      auth: {
        oauth: {
          name: "Fixture",
          login: async () => {
            throw new Error("not in tests");
          },
          refresh: async (c: Record<string, unknown>) => {
            calls.push(String(c.refresh));
            return refresh(c);
          },
          toAuth: async (c: Record<string, unknown>) => ({ apiKey: String(c.access) }),
        },
      },
    };
    const options = { extraProviders: [provider] } as unknown as PiLoginOptions;
    return {
      calls,
      refreshLogin: (req: Parameters<typeof refreshHostLoginWithPi>[0]) => refreshHostLoginWithPi(req, options),
    };
  }

  test("an expired token is refreshed; the guest gets the new access token, the host keeps the rotated refresh token", async () => {
    const later = Date.now() + 3_600_000;
    await auth({
      fx: { type: "oauth", access: "OLD", refresh: "R1", expires: Date.now() - 1000 },
      other: { type: "api_key", key: "K" },
    });
    const fx = fixture(async (c) => ({ ...c, access: "NEW", refresh: "R2", expires: later }));
    const credential = await resolveHostCredential("fx", { env: env(), refreshLogin: fx.refreshLogin });
    expect(fx.calls).toEqual(["R1"]);
    expect(credential).toEqual({
      provider: "fx",
      kind: "oauth",
      value: "NEW",
      expiresAt: later,
      refreshed: true,
    });
    const host = JSON.parse(await readFile(join(dir, "auth.json"), "utf8"));
    expect(host.fx).toEqual({ type: "oauth", access: "NEW", refresh: "R2", expires: later });
    expect(host.other).toEqual({ type: "api_key", key: "K" });
  });

  test("a token with less than REFRESH_BELOW_MS left is refreshed too; one with more is not", async () => {
    const fx = fixture(async (c) => ({ ...c, access: "NEW", expires: Date.now() + 3_600_000 }));
    await auth({ fx: { type: "oauth", access: "SOON", refresh: "R1", expires: Date.now() + REFRESH_BELOW_MS / 2 } });
    expect((await resolveHostCredential("fx", { env: env(), refreshLogin: fx.refreshLogin })).value).toBe("NEW");
    await auth({ fx: { type: "oauth", access: "FINE", refresh: "R1", expires: Date.now() + 2 * REFRESH_BELOW_MS } });
    const fine = await resolveHostCredential("fx", { env: env(), refreshLogin: fx.refreshLogin });
    expect(fine).toMatchObject({ value: "FINE", refreshed: false });
    expect(fx.calls).toEqual(["R1"]);
  });

  test("a refresh the provider rejects is refused with a re-login hint, and the host login is left as it was", async () => {
    const stored = { type: "oauth", access: "OLD", refresh: "R1", expires: Date.now() - 1000 };
    await auth({ fx: stored });
    const fx = fixture(async () => {
      throw new Error("invalid_grant: refresh token revoked");
    });
    const error = await resolveHostCredential("fx", { env: env(), refreshLogin: fx.refreshLogin }).catch(
      (e: unknown) => e,
    );
    expect(error).toMatchObject({
      code: "REVIEW_SETUP_TOKEN_UNUSABLE",
      message: expect.stringContaining("Pi could not refresh the host's fx login"),
      hint: expect.stringContaining("/login"),
    });
    expect((error as Error).message).toContain("invalid_grant");
    expect(JSON.parse(await readFile(join(dir, "auth.json"), "utf8")).fx).toEqual(stored);
  });
});
