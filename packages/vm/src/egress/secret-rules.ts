// Where a secret's value may go in a request from the guest, and the substitution itself, for both
// ways out: HTTPS through Gondolin (secret-fetch.ts) and plain HTTP to a host port through the
// host-port proxy (host-port-proxy.ts). The value goes only into a credential header
// (`authorization`, `x-api-key`, `proxy-authorization`, and the names a secret lists in
// `headers`), and only to a destination the secret allows: HTTPS on port 443 to one of its hosts,
// or a host port it lists. Headers that servers tend to quote back (`user-agent`, `anthropic-beta`,
// a custom debug header) never carry it, and neither does clear text on another port. A request
// with a secret's placeholder (or its value) anywhere else in its head (another header, the URL)
// is refused as a whole. Bodies are not looked at: the value never goes into a body, and a
// placeholder there is just a random string that reaches the server as it is.
import { VmError } from "../errors.js";
import { isHostAllowed } from "./host-patterns.js";
import { scrubPatterns, type ScrubPattern, type ScrubbedSecret } from "./secret-scrubber.js";

/** Headers every secret may be put into. */
export const CREDENTIAL_HEADERS: readonly string[] = Object.freeze([
  "authorization",
  "x-api-key",
  "proxy-authorization",
]);

/** Headers whose Basic credentials are decoded to find a placeholder inside. */
const BASIC_HEADERS = new Set(["authorization", "proxy-authorization"]);
const BASIC = /^(Basic)(\s+)(\S+)(\s*)$/i;

/** One secret of a VM as the request rules and the scrubber use it. */
export interface HeldSecret {
  /** Guest environment variable name. */
  name: string;
  /** What the guest sees (the latest, for a placeholder that changed with its value). */
  placeholder: string;
  /** Earlier placeholders given by `update`: still put in (a process may hold one), never scrubbed to. */
  aliases: string[];
  /** The value put in now. */
  value: string;
  /** Values replaced by `updateSecret`, still kept out of responses. */
  previous: string[];
  /** Host patterns of its HTTPS requests (not host ports). */
  httpHosts: readonly string[];
  /** Lowercased header names it may be put into. */
  headers: ReadonlySet<string>;
}

/** The secrets of one VM, shared by both ways out so an update reaches both. */
export class SecretStore {
  private readonly byName = new Map<string, HeldSecret>();
  /** The patterns of the secrets as they are now; dropped by each change. */
  private cached: ScrubPattern[] | undefined;

  /** Adds a secret (the caller checked it). */
  add(secret: Omit<HeldSecret, "previous" | "headers" | "aliases"> & { headers?: readonly string[] }): void {
    const headers = new Set([...CREDENTIAL_HEADERS, ...(secret.headers ?? []).map((name) => name.toLowerCase())]);
    this.byName.set(secret.name, { ...secret, headers, previous: [], aliases: [] });
    this.cached = undefined;
  }

  /** The secret named `name`, if any. */
  get(name: string): HeldSecret | undefined {
    return this.byName.get(name);
  }

  /** Every secret. */
  all(): HeldSecret[] {
    return [...this.byName.values()];
  }

  /** True when there is none. */
  get empty(): boolean {
    return this.byName.size === 0;
  }

  /**
   * Puts `value` in from now on; the old value stays on the scrubber's list. A new `placeholder`
   * becomes the one responses show; the old one stays accepted (at most the 16 latest).
   */
  update(name: string, value: string, placeholder?: string): void {
    const secret = this.byName.get(name);
    if (!secret)
      throw new VmError("VM_SECRET_INVALID", `no secret named ${name} was given to this VM`, {
        details: { secret: name },
      });
    this.cached = undefined;
    if (secret.value !== value) secret.previous.push(secret.value);
    secret.previous = secret.previous.filter((old) => old !== value);
    secret.value = value;
    if (placeholder !== undefined && placeholder !== secret.placeholder) {
      secret.aliases = [secret.placeholder, ...secret.aliases.filter((old) => old !== placeholder)].slice(0, 16);
      secret.placeholder = placeholder;
    }
  }

  /**
   * What the scrubber replaces now: every value, old ones too, in every form. Built once per
   * change (a few dozen patterns per value), not per request; callers must not modify it.
   */
  patterns(): ScrubPattern[] {
    this.cached ??= scrubPatterns(
      this.all().flatMap((secret) =>
        [secret.value, ...secret.previous].map((value) => ({ value, placeholder: secret.placeholder })),
      ),
    );
    return this.cached;
  }
}

/** A request head as the rules see it. */
export interface RequestHead {
  /** The absolute URL the host will fetch. */
  url: string;
  /** Header names (any case) and values. */
  headers: Iterable<readonly [string, string]>;
}

/** The verdict on a request head: refused with a reason, or allowed with the secrets it carries. */
export type Placement = { ok: false; reason: string } | { ok: true; carried: HeldSecret[] };

/** What a secret allows: whether its value may go to this request's destination. */
export type DestinationRule = (secret: HeldSecret, url: URL) => boolean;

/** HTTPS to port 443 of one of the secret's hosts: the rule of requests through Gondolin. */
export const httpsDestination: DestinationRule = (secret, url) =>
  url.protocol === "https:" && (url.port === "" || url.port === "443") && isHostAllowed(url.hostname, secret.httpHosts);

/** The texts a header value shows: itself, and inside a Basic credential header the decoded pair. */
function headerTexts(name: string, value: string): string[] {
  const basic = BASIC_HEADERS.has(name) ? BASIC.exec(value) : null;
  return basic ? [value, Buffer.from(basic[3]!, "base64").toString("utf8")] : [value];
}

/** The placeholders the guest may send for `secret`: the latest first, then earlier ones. */
function placeholdersOf(secret: HeldSecret): string[] {
  return [secret.placeholder, ...secret.aliases];
}

/** True when `text` holds one of the secret's placeholders or its value. */
function mentions(text: string, secret: HeldSecret): boolean {
  return (
    placeholdersOf(secret).some((placeholder) => text.includes(placeholder)) ||
    (secret.value !== "" && text.includes(secret.value))
  );
}

/** True when `text` holds a value the secret had before an update (never sent again). */
function mentionsPrevious(text: string, secret: HeldSecret): boolean {
  return secret.previous.some((value) => value !== "" && text.includes(value));
}

/** The URL as sent and percent-decoded (a decoding error leaves it as sent). */
function urlTexts(url: string): string[] {
  try {
    return [url, decodeURIComponent(url)];
  } catch {
    return [url];
  }
}

/**
 * Where `head` puts each secret, judged by `allows`: refused when a placeholder or value is in
 * the URL, in a header the secret may not go into, or bound for a destination it does not allow.
 * Reasons name the secret and the header, never a value.
 */
export function placeSecrets(head: RequestHead, secrets: readonly HeldSecret[], allows: DestinationRule): Placement {
  if (secrets.length === 0) return { ok: true, carried: [] };
  const url = new URL(head.url);
  const carried = new Set<HeldSecret>();
  for (const secret of secrets) {
    if (urlTexts(head.url).some((text) => mentions(text, secret) || mentionsPrevious(text, secret))) {
      return { ok: false, reason: `secret ${secret.name} may not be sent in a URL` };
    }
  }
  for (const [rawName, value] of head.headers) {
    const name = rawName.toLowerCase();
    for (const secret of secrets) {
      const texts = headerTexts(name, value);
      if (texts.some((text) => mentionsPrevious(text, secret))) {
        return { ok: false, reason: `secret ${secret.name} was replaced; its old value is not sent` };
      }
      if (!texts.some((text) => mentions(text, secret))) continue;
      if (!secret.headers.has(name)) {
        return {
          ok: false,
          reason: `secret ${secret.name} may not be sent in header ${name}; it goes only into ${[...secret.headers].join(", ")}`,
        };
      }
      if (!allows(secret, url)) {
        return { ok: false, reason: `secret ${secret.name} may not be sent to ${url.protocol}//${url.host}` };
      }
      carried.add(secret);
    }
  }
  return { ok: true, carried: [...carried] };
}

/** `text` with each placeholder of `secrets` replaced by its value. */
function replacePlaceholders(text: string, secrets: readonly HeldSecret[]): string {
  let out = text;
  for (const secret of secrets) {
    for (const placeholder of placeholdersOf(secret)) {
      if (out.includes(placeholder)) out = out.split(placeholder).join(secret.value);
    }
  }
  return out;
}

/**
 * One header value with the placeholders of the `secrets` that may go into header `name` replaced
 * by their values, also inside a Basic credential (decoded and encoded again). The same string
 * when nothing was replaced.
 */
export function substituteHeader(name: string, value: string, secrets: readonly HeldSecret[]): string {
  const lower = name.toLowerCase();
  const allowed = secrets.filter((secret) => secret.headers.has(lower));
  if (allowed.length === 0) return value;
  let out = replacePlaceholders(value, allowed);
  const basic = BASIC_HEADERS.has(lower) ? BASIC.exec(out) : null;
  if (basic) {
    const decoded = Buffer.from(basic[3]!, "base64").toString("utf8");
    const replaced = replacePlaceholders(decoded, allowed);
    if (replaced !== decoded) {
      out = `${basic[1]}${basic[2]}${Buffer.from(replaced, "utf8").toString("base64")}${basic[4]}`;
    }
  }
  return out;
}

/**
 * What a server may echo of one header value the host filled in, each with what the guest wrote
 * there (`value`: as sent on, `placeholder`: as the guest wrote it): the whole value (`Bearer
 * <value>`), and of Basic credentials the base64 blob, whose characters after `user:` are not a
 * base64 form of the value alone. For `echoPatterns` of the scrubber.
 */
export function substitutionEchoes(guest: string, sent: string): ScrubbedSecret[] {
  if (guest === sent) return [];
  const echoes = [{ value: sent, placeholder: guest }];
  const [written, filled] = [BASIC.exec(guest), BASIC.exec(sent)];
  if (written && filled && written[3] !== filled[3]) echoes.push({ value: filled[3]!, placeholder: written[3]! });
  return echoes;
}

/** The 403 text for a refused request: what pi-sandbox refused and why. */
export function refusalText(reason: string): string {
  return `pi-sandbox: request refused: ${reason}\n`;
}
