// Placeholders shaped like the token, checked against Pi's own code: Pi's ChatGPT client decodes
// the account id from the JWT placeholder and sends it as it sends the real token's, and Pi's
// Copilot login derives the same API endpoint from the shaped Copilot token as from the real one;
// Pi's model runtime takes the guest's auth.json entry holding either.
import { randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { builtinProviders, getBuiltinModels } from "@earendil-works/pi-ai/providers/all";
import { ModelRuntime } from "@earendil-works/pi-coding-agent";
import { guestEntry } from "../src/live.js";
import { CHATGPT_AUTH_CLAIM, shapePlaceholder } from "../src/placeholder-shape.js";

const pi = new Map(builtinProviders().map((provider) => [provider.id, provider]));
const ACCOUNT = "9c1f5d2e-4b7a-4e0f-9d1c-acc0un7-1d";
const EXP = Math.floor(Date.now() / 1000) + 3600;

/** A token shaped like a real ChatGPT access token, with claims the placeholder must not carry. */
function chatgptToken(extra: Record<string, unknown> = {}): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const header = part({ alg: "RS256", kid: "b1a8e1f0-key", typ: "JWT" });
  const payload = part({
    aud: ["https://api.openai.com/v1"],
    client_id: "app_client",
    exp: EXP,
    iat: EXP - 864000,
    iss: "https://auth.openai.com",
    jti: "real-jti-0001",
    scp: ["openid", "profile", "email", "offline_access"],
    sub: "google-oauth2|1234567890",
    [CHATGPT_AUTH_CLAIM]: {
      chatgpt_account_id: ACCOUNT,
      chatgpt_plan_type: "plus",
      chatgpt_user_id: "user-private-id",
      user_id: "user-private-id",
    },
    "https://api.openai.com/profile": { email: "someone@example.com", email_verified: true },
    ...extra,
  });
  return `${header}.${payload}.${randomBytes(256).toString("base64url")}`;
}

const claims = (jwt: string) =>
  JSON.parse(Buffer.from(jwt.split(".")[1]!, "base64url").toString("utf8")) as Record<string, unknown>;

/** What Pi's ChatGPT (openai-codex) client sends for `apiKey`, against a local server. */
async function codexHeaders(apiKeys: string[]): Promise<http.IncomingHttpHeaders[]> {
  const seen: http.IncomingHttpHeaders[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    req.on("end", () => res.writeHead(401, { "content-type": "application/json" }).end('{"error":"no"}'));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const model = {
      ...getBuiltinModels("openai-codex")[0]!,
      baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    };
    for (const apiKey of apiKeys) {
      const context = { messages: [{ role: "user", content: "hi", timestamp: 0 }] };
      const events = pi
        .get("openai-codex")!
        .stream(model, context as never, { apiKey, maxRetries: 0, transport: "sse" } as never);
      for await (const event of events) if (event.type === "error" || event.type === "done") break;
    }
  } finally {
    server.close();
  }
  return seen;
}

test("the ChatGPT placeholder keeps the header, account id, plan and expiry; jti and signature are random", () => {
  const token = chatgptToken();
  const { placeholder, expiresAt } = shapePlaceholder("chatgpt-jwt", token, "openai-codex");
  const [header, , signature] = placeholder.split(".");
  expect(header).toBe(token.split(".")[0]);
  expect(signature).not.toBe(token.split(".")[2]);
  expect(signature!.length).toBeGreaterThanOrEqual(token.split(".")[2]!.length - 2);
  expect(claims(placeholder)).toEqual({
    iat: EXP - 864000,
    exp: EXP,
    [CHATGPT_AUTH_CLAIM]: { chatgpt_account_id: ACCOUNT, chatgpt_plan_type: "plus" },
    jti: expect.stringMatching(/^[0-9a-f-]{36}$/),
  });
  expect(expiresAt).toBe(EXP * 1000);
  // Nothing else of the token: no e-mail, user id, subject, and no part of the signature.
  for (const secret of ["someone@example.com", "user-private-id", "google-oauth2", "real-jti-0001"]) {
    expect(Buffer.from(placeholder.split(".")[1]!, "base64url").toString()).not.toContain(secret);
  }
  expect(placeholder).not.toContain(token.split(".")[2]!.slice(0, 16));
  // Two shapes of one token differ (a random jti and signature each time).
  expect(shapePlaceholder("chatgpt-jwt", token, "openai-codex").placeholder).not.toBe(placeholder);
});

test("Pi's ChatGPT client sends the placeholder with the account id it decoded, as for the real token", async () => {
  const token = chatgptToken();
  const placeholders = Array.from(
    { length: 4 },
    () => shapePlaceholder("chatgpt-jwt", token, "openai-codex").placeholder,
  );
  const seen = await codexHeaders([token, ...placeholders]);
  expect(seen.map((h) => [h.authorization, h["chatgpt-account-id"]])).toEqual(
    [token, ...placeholders].map((sent) => [`Bearer ${sent}`, ACCOUNT]),
  );
});

test("Pi's Copilot login reads the same endpoint from the shaped token; the HMAC and tid are random", async () => {
  const mac = randomBytes(32).toString("hex");
  const token = `tid=private-tracking-id;exp=${EXP};sku=copilot_for_business_seat;proxy-ep=proxy.business.githubcopilot.com;st=dotcom;chat=1;8kp=1:${mac}`;
  const { placeholder, expiresAt } = shapePlaceholder("copilot-token", token, "github-copilot");
  expect(placeholder).toMatch(
    new RegExp(
      `^tid=[0-9a-f]{32};exp=${EXP};sku=copilot_for_business_seat;proxy-ep=proxy\\.business\\.githubcopilot\\.com;st=dotcom;8kp=1:[0-9a-f]{64}$`,
    ),
  );
  expect(placeholder).not.toContain(mac);
  expect(placeholder).not.toContain("private-tracking-id");
  expect(expiresAt).toBe(EXP * 1000);
  expect(shapePlaceholder("copilot-token", token, "github-copilot").apiHost).toBe("api.business.githubcopilot.com");
  const oauth = pi.get("github-copilot")!.auth.oauth!;
  const auth = (access: string) =>
    oauth.toAuth!({ type: "oauth", access, refresh: "r", expires: EXP * 1000 } as never) as Promise<{
      baseUrl?: string;
      apiKey?: string;
    }>;
  expect(await auth(placeholder)).toEqual({ apiKey: placeholder, baseUrl: "https://api.business.githubcopilot.com" });
  expect((await auth(token)).baseUrl).toBe("https://api.business.githubcopilot.com");
});

test.each([
  ["chatgpt-jwt", "openai-codex", "not-a-jwt-at-all-secret"],
  ["chatgpt-jwt", "openai-codex", `${chatgptToken({ [CHATGPT_AUTH_CLAIM]: {} })}`],
  ["copilot-token", "github-copilot", "tid=x;exp=1;8kp=1:abcdef-secret"],
] as const)("a %s token Pi could not parse is REVIEW_SETUP_TOKEN_UNUSABLE, never quoted", (shape, provider, token) => {
  let error: unknown;
  try {
    shapePlaceholder(shape, token, provider);
  } catch (caught) {
    error = caught;
  }
  expect(error).toMatchObject({ code: "REVIEW_SETUP_TOKEN_UNUSABLE", hint: expect.stringContaining("/login") });
  expect((error as Error).message).not.toContain(token.slice(-12));
});

test("Pi's model runtime takes the guest's auth.json entries: the placeholder as the key, Copilot's endpoint from it", async () => {
  const dir = await mkdtemp(join(tmpdir(), "shaped-auth-"));
  try {
    const expires = Date.now() + 3_600_000;
    const jwt = shapePlaceholder("chatgpt-jwt", chatgptToken(), "openai-codex").placeholder;
    const copilot = shapePlaceholder(
      "copilot-token",
      `tid=t;exp=${EXP};proxy-ep=proxy.enterprise.githubcopilot.com;8kp=1:${"ab".repeat(32)}`,
      "github-copilot",
    ).placeholder;
    const authPath = join(dir, "auth.json");
    await writeFile(
      authPath,
      JSON.stringify({ "openai-codex": guestEntry(jwt, expires), "github-copilot": guestEntry(copilot, expires) }),
    );
    const runtime = await ModelRuntime.create({
      authPath,
      modelsPath: null,
      allowModelNetwork: false,
      refreshOnCreate: false,
    });
    expect((await runtime.getAuth("openai-codex"))?.auth).toEqual({ apiKey: jwt });
    expect((await runtime.getAuth("github-copilot"))?.auth).toEqual({
      apiKey: copilot,
      baseUrl: "https://api.enterprise.githubcopilot.com",
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
