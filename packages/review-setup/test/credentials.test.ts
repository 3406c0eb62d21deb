import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hostAgentDir, resolveHostCredential } from "../src/credentials.js";

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
    entry: { type: "oauth", access: "A", refresh: "", expires: NOW + 3_600_000, accountId: "acct" },
    expiresAt: NOW + 3_600_000,
  });
  expect(JSON.stringify(credential)).not.toContain('"R"');
});

test("an API key is passed as is, without expiry", async () => {
  await auth({ p: { type: "api_key", key: "K" } });
  expect(await resolveHostCredential("p", { env: env(), now: NOW })).toEqual({
    provider: "p",
    kind: "api_key",
    entry: { type: "api_key", key: "K" },
    expiresAt: undefined,
  });
});

test.each([
  ["no auth.json", undefined, "REVIEW_SETUP_LOGIN_MISSING", "does not exist"],
  ["no entry", { other: { type: "api_key", key: "K" } }, "REVIEW_SETUP_LOGIN_MISSING", "no credential for p"],
  [
    "an expired token",
    { p: { type: "oauth", access: "A", refresh: "R", expires: NOW - 1 } },
    "REVIEW_SETUP_TOKEN_UNUSABLE",
    "expires at",
  ],
  [
    "a token about to expire",
    { p: { type: "oauth", access: "A", refresh: "R", expires: NOW + 60_000 } },
    "REVIEW_SETUP_TOKEN_UNUSABLE",
    "expires at",
  ],
  ["a key command", { p: { type: "api_key", key: "!op read x" } }, "REVIEW_SETUP_TOKEN_UNUSABLE", "command"],
  ["an unknown shape", { p: { type: "weird" } }, "REVIEW_SETUP_TOKEN_UNUSABLE", "unknown shape"],
])("%s is refused with a hint", async (_label, data, code, text) => {
  if (data !== undefined) await auth(data);
  const error = await resolveHostCredential("p", { env: env(), now: NOW }).catch((e: unknown) => e);
  expect(error).toMatchObject({ code, message: expect.stringContaining(text), hint: expect.any(String) });
  expect((error as Error).message).not.toContain('"A"');
});
