// Preview descriptions: specs, links, ad-hoc previews and their validation.
import { IngressError } from "./errors.js";

/** One declared link of a preview: an app path (`/docs`) or an absolute external `http(s)://` URL. */
export interface PreviewLink {
  /** App path starting with `/`, or an absolute `http://`/`https://` URL that is passed through. */
  url: string;
  /** Human title. */
  title: string;
  /** Optional longer text, as declared. */
  description?: string;
  /** Optional one-level group name, as declared. */
  folder?: string;
}

/** What to preview: one guest port, reached through one host origin, with its links. */
export interface PreviewSpec {
  /** Stable identity: the service name, or `port-<n>` for an ad-hoc preview. Also the lease key. */
  key: string;
  /** TCP port on the guest's 127.0.0.1 that serves plain HTTP (and WebSocket). */
  guestPort: number;
  /** Links to list; app paths become paths on the preview's origin. */
  links: readonly PreviewLink[];
}

/** A link as returned to users: `url` is absolute and ready to open. */
export interface ResolvedPreviewLink {
  /** `http://127.0.0.1:<hostPort><path>` for app paths; the declared URL for external links. */
  url: string;
  /** Human title. */
  title: string;
  /** As declared, when declared. */
  description?: string;
  /** As declared, when declared. */
  folder?: string;
  /** True for declared absolute `http(s)://` links, which do not go through the preview. */
  external: boolean;
}

/** An open preview. */
export interface PreviewInfo {
  /** The preview key. */
  key: string;
  /** Guest port requests are forwarded to. */
  guestPort: number;
  /** Leased host port on 127.0.0.1. */
  hostPort: number;
  /** `http://127.0.0.1:<hostPort>`: the service's `PUBLIC_URL`. */
  origin: string;
  /** Every declared link, resolved. */
  links: ResolvedPreviewLink[];
}

/** A host port held for a preview whose guest port is not known yet (`PreviewGateway.reserve`). */
export interface PreviewReservation {
  /** The preview key. */
  key: string;
  /** Leased host port on 127.0.0.1. */
  hostPort: number;
  /** `http://127.0.0.1:<hostPort>`: the service's `PUBLIC_URL`. */
  origin: string;
}

/** Arguments of an ad-hoc `preview {port}` for a guest server the product does not supervise. */
export interface AdHocPreviewOptions {
  /** Guest port already listening. */
  port: number;
  /** Link title; default `port <n>`. */
  title?: string;
  /** Link description. */
  description?: string;
}

const keyPattern = /^[a-z0-9][a-z0-9-]{0,62}$/;
// A path on our origin: one leading slash (two would be a protocol-relative URL to another host),
// then printable ASCII without spaces or backslashes.
const appPathPattern = /^\/(?![/\\])[\x21-\x7e]*$/;

/** The preview spec of an ad-hoc `preview {port}`: key `port-<n>`, one link to `/`. */
export function adHocPreview(options: AdHocPreviewOptions): PreviewSpec {
  const link: PreviewLink = { url: "/", title: options.title ?? `port ${options.port}` };
  if (options.description !== undefined) link.description = options.description;
  return { key: `port-${options.port}`, guestPort: options.port, links: [link] };
}

/** Throws `INGRESS_INVALID_PREVIEW` naming every problem of `spec`. */
export function validatePreview(spec: PreviewSpec): void {
  const problems: string[] = [];
  if (typeof spec.key !== "string" || !keyPattern.test(spec.key)) {
    problems.push(`key ${JSON.stringify(spec.key)} must match ${keyPattern.source}`);
  }
  if (!Number.isInteger(spec.guestPort) || spec.guestPort < 1 || spec.guestPort > 65535) {
    problems.push(`guestPort ${String(spec.guestPort)} must be an integer 1-65535`);
  }
  if (!Array.isArray(spec.links)) {
    problems.push("links must be a list");
  } else {
    spec.links.forEach((link, index) => {
      const at = `links[${index}]`;
      if (typeof link?.title !== "string" || link.title.trim() === "")
        problems.push(`${at}.title must be non-empty text`);
      if (typeof link?.url !== "string" || linkKind(link.url) === undefined) {
        problems.push(`${at}.url ${JSON.stringify(link?.url)} must be an app path like "/docs" or an http(s):// URL`);
      }
      for (const field of ["description", "folder"] as const) {
        if (link?.[field] !== undefined && typeof link[field] !== "string")
          problems.push(`${at}.${field} must be text`);
      }
    });
  }
  if (problems.length > 0) {
    throw new IngressError("INGRESS_INVALID_PREVIEW", `invalid preview ${String(spec.key)}: ${problems.join("; ")}`, {
      details: { key: spec.key, problems },
    });
  }
}

/** Resolves declared links against `origin`; assumes {@link validatePreview} passed. */
export function resolveLinks(links: readonly PreviewLink[], origin: string): ResolvedPreviewLink[] {
  return links.map((link) => {
    const external = linkKind(link.url) === "external";
    const resolved: ResolvedPreviewLink = {
      url: external ? link.url : `${origin}${link.url}`,
      title: link.title,
      external,
    };
    if (link.description !== undefined) resolved.description = link.description;
    if (link.folder !== undefined) resolved.folder = link.folder;
    return resolved;
  });
}

function linkKind(url: string): "app" | "external" | undefined {
  if (appPathPattern.test(url)) return "app";
  if (!/^https?:\/\//i.test(url)) return undefined;
  try {
    const parsed = new URL(url);
    return parsed.hostname === "" ? undefined : "external";
  } catch {
    return undefined;
  }
}
