// The fetch Gondolin sends the guest's HTTP(S) requests with when the VM has secrets (its `fetch`
// option), in place of its own. Gondolin's `createHttpHooks({ secrets })` would put a value into
// any request header on any scheme and port and never look at what comes back, so a server that
// quotes a header in an error, or any echo endpoint, handed the value to the guest. Here:
// - the request rules of secret-rules.ts decide (the egress policy's `isRequestAllowed` has
//   already refused what they refuse; checked again here for each hop), and the value goes only
//   into the credential headers of a request to HTTPS port 443 of one of the secret's hosts;
// - every response is scrubbed on its way back (secret-scrubber.ts): reason phrase, header values
//   (a header whose name holds a value is dropped) and the body, as it streams. The length of a
//   scrubbed body is not known in advance, so its `content-length` is dropped (Gondolin then
//   sends it chunked);
// - the header values it filled in are scrubbed too, back to what the guest wrote (an echoed
//   Basic blob is not a base64 form of the value alone);
// - compressed bodies: the upstream is asked for gzip, deflate or br only, and never sent the
//   guest's TE. The host decodes every content and transfer coding itself (http-codings.ts), not
//   undici's fetch, which passes a body on still compressed when a member of the list is one it
//   does not know (`identity, gzip`, `gzip,`) and never looks at transfer codings: a dispatcher
//   interceptor hides `content-encoding` from fetch under CODINGS_HEADER. Gondolin always gave the
//   guest decoded bodies; a body in a coding the host cannot decode is answered with 502 instead.
// Upstream connections go through the guarded pools of upstream-dispatchers.ts.
import { Readable, pipeline } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import type { HttpHooks } from "@earendil-works/gondolin";
import { DecoratorHandler, Headers, Response, fetch, type Dispatcher, type RequestInit } from "undici";
import { answerCodings, decoderFor } from "./http-codings.js";
import {
  httpsDestination,
  placeSecrets,
  refusalText,
  substituteHeader,
  substitutionEchoes,
  type SecretStore,
} from "./secret-rules.js";
import {
  ScrubTransform,
  echoPatterns,
  mergePatterns,
  scrubText,
  scrubWebStream,
  type ScrubPattern,
  type ScrubbedSecret,
} from "./secret-scrubber.js";
import { upstreamDispatchers, type UpstreamOverrides } from "./upstream-dispatchers.js";

export { guardedLookup, type UpstreamOverrides } from "./upstream-dispatchers.js";

/** The codings the host decodes, asked of every upstream. */
const ACCEPT_ENCODING = "gzip, deflate, br";
/** Where the upstream's `content-encoding` reaches this file, out of undici fetch's sight. */
const CODINGS_HEADER = "x-pi-sandbox-content-encoding";
const NULL_BODY_STATUS = new Set([101, 204, 205, 304]);

/** What {@link createSecretFetch} needs. */
export interface SecretFetchOptions {
  /** The VM's secrets (shared with the host-port proxies). */
  store: SecretStore;
  /** The egress policy's address check (Gondolin's, from `createHttpHooks`). */
  isIpAllowed: NonNullable<HttpHooks["isIpAllowed"]>;
  /** Test seam, see {@link UpstreamOverrides}. */
  upstream?: UpstreamOverrides;
  /** Told of each secret a request carries out (its name and the host, never the value). */
  onUse?: (use: { secret: string; host: string }) => void;
}

/** A fetch for Gondolin's `fetch` option, with `close()` for its connection pools. */
export interface SecretFetch {
  /** Gondolin calls it for each request hop (redirects are never followed here). */
  fetch: (input: string, init?: RequestInit) => Promise<Response>;
  /** Closes every upstream connection. */
  close(): Promise<void>;
}

/** Builds the fetch described above. */
export function createSecretFetch(options: SecretFetchOptions): SecretFetch {
  const pools = upstreamDispatchers(options.isIpAllowed, options.upstream, hideContentEncoding);
  const secretFetch = async (input: string, init: RequestInit = {}): Promise<Response> => {
    const headers = new Headers(init.headers);
    const secrets = options.store.all();
    const placement = placeSecrets({ url: input, headers }, secrets, httpsDestination);
    if (!placement.ok) {
      await cancelBody(init.body);
      return textResponse(403, "Forbidden", refusalText(placement.reason));
    }
    const echoes: ScrubbedSecret[] = [];
    for (const [name, value] of headers) {
      const replaced = substituteHeader(name, value, placement.carried);
      if (replaced === value) continue;
      headers.set(name, replaced);
      echoes.push(...substitutionEchoes(value, replaced));
    }
    if (echoes.length > 0) {
      const host = new URL(input).hostname;
      for (const secret of placement.carried) options.onUse?.({ secret: secret.name, host });
    }
    headers.set("accept-encoding", ACCEPT_ENCODING);
    // A transfer coding the guest asks for would be one more thing to decode (or refuse).
    headers.delete("te");
    const url = new URL(input);
    const policyPort = Number(url.port || (url.protocol === "https:" ? 443 : 80));
    if (options.upstream?.httpsPort && url.protocol === "https:" && policyPort === 443) {
      url.port = String(options.upstream.httpsPort);
    }
    const response = await fetch(url, {
      ...init,
      headers,
      redirect: "manual",
      dispatcher: pools.dispatcherFor(url, policyPort),
    });
    const stored = options.store.patterns();
    const patterns = echoes.length > 0 ? mergePatterns(echoPatterns(echoes), stored) : stored;
    return scrubbedResponse(response, patterns, (init.method ?? "GET").toUpperCase(), url.hostname);
  };
  return {
    fetch: secretFetch,
    close: () => pools.close(),
  };
}

/**
 * The dispatcher interceptor that renames each response `content-encoding` to CODINGS_HEADER, so
 * that undici's fetch leaves bodies as they came and the host decodes them (a header of that name
 * from the upstream itself is dropped first).
 */
const hideContentEncoding: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (options, handler) =>
  dispatch(options, new HideContentEncoding(handler) as Dispatcher.DispatchHandlers);

/** undici's DecoratorHandler as it is at runtime: it passes each call on (its types declare none). */
const Decorator = DecoratorHandler as unknown as new (handler: Dispatcher.DispatchHandlers) => {
  onHeaders(statusCode: number, headers: Buffer[], resume: () => void, statusText: string): boolean;
};

class HideContentEncoding extends Decorator {
  override onHeaders(statusCode: number, raw: Buffer[], resume: () => void, statusText: string): boolean {
    const renamed: Buffer[] = [];
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!.toString("latin1").toLowerCase();
      if (name === CODINGS_HEADER) continue;
      renamed.push(name === "content-encoding" ? Buffer.from(CODINGS_HEADER) : raw[i]!, raw[i + 1]!);
    }
    return super.onHeaders(statusCode, renamed, resume, statusText);
  }
}

/** `response` as the guest may see it: decoded and scrubbed, or a 502 when its body cannot be. */
async function scrubbedResponse(
  response: Response,
  patterns: readonly ScrubPattern[],
  method: string,
  host: string,
): Promise<Response> {
  const hasBody = response.body !== null && method !== "HEAD" && !NULL_BODY_STATUS.has(response.status);
  const contentEncoding = response.headers.get(CODINGS_HEADER);
  const transferEncoding = response.headers.get("transfer-encoding");
  const verdict = answerCodings(
    contentEncoding === null ? [] : [contentEncoding],
    transferEncoding === null ? [] : [transferEncoding],
  );
  if (hasBody && !verdict.ok) {
    await response.body!.cancel().catch(() => undefined);
    const text = `pi-sandbox: ${host} answered in a coding the host cannot check for secrets: ${verdict.reason}\n`;
    return textResponse(502, "Bad Gateway", scrubText(text, patterns));
  }
  const headers = scrubbedHeaders(response.headers, patterns);
  // The body handed on is decoded and unframed: Gondolin frames it anew.
  headers.delete(CODINGS_HEADER);
  headers.delete("transfer-encoding");
  if (hasBody) headers.delete("content-length");
  else if (contentEncoding !== null) headers.set("content-encoding", scrubText(contentEncoding, patterns));
  const decodings = verdict.ok ? verdict.decodings : [];
  let body: ReadableStream<Uint8Array> | null = null;
  if (hasBody && decodings.length === 0) body = scrubWebStream(response.body!, patterns);
  else if (hasBody) {
    // Node's zlib streams decode; an error in them (a corrupt body) ends the guest's body too.
    const scrubbed = new ScrubTransform(patterns);
    const source = Readable.fromWeb(response.body! as NodeReadableStream<Uint8Array>);
    pipeline([source, ...decodings.map(decoderFor), scrubbed], () => undefined);
    body = Readable.toWeb(scrubbed) as ReadableStream<Uint8Array>;
  }
  return new Response(body, {
    status: response.status,
    statusText: scrubText(response.statusText, patterns),
    headers,
  });
}

/** Response headers with every value scrubbed; a header whose name holds a value is dropped. */
export function scrubbedHeaders(source: Headers, patterns: readonly ScrubPattern[]): Headers {
  const headers = new Headers();
  for (const [name, value] of source) {
    if (name === "set-cookie" || scrubText(name, patterns) !== name) continue;
    headers.append(name, scrubText(value, patterns));
  }
  for (const cookie of source.getSetCookie()) headers.append("set-cookie", scrubText(cookie, patterns));
  return headers;
}

/** A short plain-text answer made on the host. */
function textResponse(status: number, statusText: string, text: string): Response {
  return new Response(text, { status, statusText, headers: { "content-type": "text/plain; charset=utf-8" } });
}

async function cancelBody(body: RequestInit["body"]): Promise<void> {
  const stream = body as { cancel?: () => Promise<void> } | null | undefined;
  if (typeof stream?.cancel === "function") await stream.cancel().catch(() => undefined);
}
