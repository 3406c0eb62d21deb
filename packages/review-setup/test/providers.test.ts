// The live provider table against Pi itself: each provider's API hosts are the hosts of Pi's base
// URLs for it, each secret name is the variable Pi reads its key from, and the Anthropic OAuth
// placeholder is one Pi's own Anthropic client sends as an OAuth token.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { builtinProviders, getBuiltinModels } from "@earendil-works/pi-ai/providers/all";
import { CHATGPT_AUTH_CLAIM, shapePlaceholder } from "../src/placeholder-shape.js";
import { LIVE_PROVIDERS, liveSecret, providerSecrets, secretDeclaration } from "../src/providers.js";

const pi = new Map(builtinProviders().map((provider) => [provider.id, provider]));

test.each(Object.entries(LIVE_PROVIDERS))("%s: Pi's base URLs and key variable", async (id, entry) => {
  const provider = pi.get(id);
  expect(provider).toBeDefined();
  const hosts = new Set(
    getBuiltinModels(id as Parameters<typeof getBuiltinModels>[0]).map((model) => new URL(model.baseUrl).hostname),
  );
  if (provider!.baseUrl) hosts.add(new URL(provider!.baseUrl).hostname);
  if (id === "github-copilot") {
    // Pi's default is the individual endpoint; a token's proxy-ep picks business or enterprise.
    expect([...hosts]).toEqual(["api.individual.githubcopilot.com"]);
    return;
  }
  expect([...hosts].sort()).toEqual([...entry.hosts].sort());
  if (!entry.apiKey) return; // OAuth only: the shaped placeholder goes into auth.json
  // Pi's API-key auth reads the key from the variable the guest sees as the secret's placeholder.
  const resolved = await provider!.auth.apiKey!.resolve({
    ctx: { env: async (name: string) => (name === entry.apiKey ? "from-env" : undefined) },
    signal: new AbortController().signal,
  } as never);
  expect(resolved?.auth).toEqual({ apiKey: "from-env" });
});

test("anthropic: the OAuth placeholder is one Pi sends as an OAuth token, and Pi reads it from that variable", async () => {
  const secret = liveSecret("anthropic", "oauth");
  expect(secret).toEqual({
    name: "ANTHROPIC_OAUTH_TOKEN",
    hosts: ["api.anthropic.com"],
    placeholderPrefix: "sk-ant-oat01-",
  });
  expect(`${secret.placeholderPrefix}PI_SANDBOX_SECRET_x`).toContain("sk-ant-oat"); // Pi's isOAuthToken test
  const resolved = await pi.get("anthropic")!.auth.apiKey!.resolve({
    ctx: { env: async (name: string) => (name === secret.name ? "sk-ant-oat01-P" : undefined) },
    signal: new AbortController().signal,
  } as never);
  expect(resolved?.auth).toEqual({ apiKey: "sk-ant-oat01-P" });
  expect(liveSecret("anthropic", "api_key")).toEqual({ name: "ANTHROPIC_API_KEY", hosts: ["api.anthropic.com"] });
});

test("providers the table refuses: typed, with what to use instead", () => {
  expect(() => liveSecret("kimi-coding")).toThrow(
    expect.objectContaining({
      code: "REVIEW_SETUP_PROVIDER_UNSUPPORTED",
      hint: expect.stringContaining("openai-codex (ChatGPT) and github-copilot logins"),
    }),
  );
  expect(() => liveSecret("openai-codex", "api_key")).toThrow(
    expect.objectContaining({ code: "REVIEW_SETUP_PROVIDER_UNSUPPORTED", hint: expect.stringContaining("/login") }),
  );
  expect(() => liveSecret("toString")).toThrow(expect.objectContaining({ code: "REVIEW_SETUP_PROVIDER_UNSUPPORTED" }));
  expect(liveSecret("openai")).toBeUndefined();
  expect(() => liveSecret("openai", "oauth")).toThrow(
    expect.objectContaining({ code: "REVIEW_SETUP_PROVIDER_UNSUPPORTED", hint: expect.stringContaining("API key") }),
  );
  // Pi has OAuth for these, whose tokens the table takes with a shaped placeholder.
  for (const id of ["openai-codex", "github-copilot"]) expect(pi.get(id)?.auth.oauth).toBeDefined();
});

test("ChatGPT and Copilot logins: their placeholder comes from a file next to the value, shaped from the token", () => {
  expect(liveSecret("openai-codex", "oauth")).toEqual({
    name: "OPENAI_CODEX_ACCESS_TOKEN",
    hosts: ["chatgpt.com"],
    shape: "chatgpt-jwt",
  });
  expect(providerSecrets("openai-codex").map((s) => secretDeclaration(s, `/d/${s.name}`))).toEqual([
    {
      from: "file:/d/OPENAI_CODEX_ACCESS_TOKEN",
      hosts: ["chatgpt.com"],
      placeholderFrom: "file:/d/OPENAI_CODEX_ACCESS_TOKEN.placeholder",
    },
  ]);
  expect(liveSecret("github-copilot", "oauth").shape).toBe("copilot-token");
});

test("declarations: one file source per secret, the prefix only where Pi needs it", () => {
  expect(providerSecrets("nope")).toEqual([]);
  expect(providerSecrets("openai").map((s) => secretDeclaration(s, `/d/${s.name}`))).toEqual([
    { from: "file:/d/OPENAI_API_KEY", hosts: ["api.openai.com"] },
  ]);
  expect(providerSecrets("anthropic").map((s) => s.name)).toEqual(["ANTHROPIC_API_KEY", "ANTHROPIC_OAUTH_TOKEN"]);
});

test("Pi's Anthropic client sends the prefixed placeholder as an OAuth token, the plain one as a key", async () => {
  const seen: http.IncomingHttpHeaders[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    req.on("end", () => res.writeHead(401, { "content-type": "application/json" }).end('{"type":"error"}'));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const anthropic = pi.get("anthropic")!;
    const model = {
      ...getBuiltinModels("anthropic")[0]!,
      baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    };
    for (const apiKey of [
      `${liveSecret("anthropic", "oauth").placeholderPrefix}PI_SANDBOX_SECRET_ab`,
      "PI_SANDBOX_SECRET_cd",
    ]) {
      const context = { messages: [{ role: "user", content: "hi", timestamp: 0 }] };
      const events = anthropic.stream(model, context as never, { apiKey, maxRetries: 0 } as never);
      for await (const event of events) if (event.type === "error" || event.type === "done") break;
    }
  } finally {
    server.close();
  }
  expect(seen.map((h) => [h.authorization, h["x-api-key"], String(h["anthropic-beta"]).includes("oauth")])).toEqual([
    ["Bearer sk-ant-oat01-PI_SANDBOX_SECRET_ab", undefined, true],
    [undefined, "PI_SANDBOX_SECRET_cd", false],
  ]);
});

/** The placeholder a guest's Pi would hold for `id`'s credential: plain, or shaped from a fake token. */
function shapedKey(id: string): string {
  const shape = LIVE_PROVIDERS[id]!.oauth?.shape;
  if (!shape) return "PI_SANDBOX_SECRET_zz";
  const token =
    shape === "chatgpt-jwt"
      ? [
          "e30",
          Buffer.from(JSON.stringify({ [CHATGPT_AUTH_CLAIM]: { chatgpt_account_id: "a" } })).toString("base64url"),
          "c2ln",
        ].join(".")
      : "tid=t;exp=1;proxy-ep=proxy.individual.githubcopilot.com;8kp=1:abcd";
  return shapePlaceholder(shape, token, id).placeholder;
}

/** Header names the host puts a secret's value into for every secret. */
const CREDENTIAL_HEADERS = ["authorization", "x-api-key", "proxy-authorization"];

test.each(Object.entries(LIVE_PROVIDERS))(
  "%s: Pi sends the key only in a header the host fills (a credential header or one the secret lists)",
  async (id, entry) => {
    // A shaped provider's client parses its token: the placeholder carries the shape, marked by "zz".
    const key = shapedKey(id);
    const seen: { url: string; headers: http.IncomingHttpHeaders }[] = [];
    const server = http.createServer((req, res) => {
      seen.push({ url: req.url ?? "", headers: req.headers });
      req.resume();
      req.on("end", () => res.writeHead(401, { "content-type": "application/json" }).end('{"error":"no"}'));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const model = {
        ...getBuiltinModels(id as Parameters<typeof getBuiltinModels>[0])[0]!,
        baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      };
      const context = { messages: [{ role: "user", content: "hi", timestamp: 0 }] };
      const events = pi
        .get(id)!
        .stream(model, context as never, { apiKey: key, maxRetries: 0, transport: "sse" } as never);
      for await (const event of events) if (event.type === "error" || event.type === "done") break;
    } finally {
      server.close();
    }
    expect(seen.length).toBeGreaterThan(0);
    const allowed = [...CREDENTIAL_HEADERS, ...(entry.headers ?? [])];
    for (const { url, headers } of seen) {
      expect(url).not.toContain(key);
      const carrying = Object.entries(headers).filter(([, value]) => String(value).includes(key));
      expect(carrying.length).toBeGreaterThan(0);
      for (const [name] of carrying) expect(allowed).toContain(name);
    }
    expect(secretDeclaration(providerSecrets(id)[0]!, "/k").headers).toEqual(entry.headers);
  },
);
