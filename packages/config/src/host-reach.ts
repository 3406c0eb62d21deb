// What in a sandbox.yaml reaches beyond its VM to the host: each such key carries a mark in the
// schema (`reaches`), and everything that shows or checks a config's reach (the trust prompt, the
// CLI's notice line, the model guard, the trust key) walks the marks instead of naming keys. A key
// added without a mark is caught by a test that looks for keys that name host paths, ports or
// credentials.
import * as v from "valibot";
import { escapeControlChars } from "./control-chars.js";
import { dottedPath } from "./describe.js";

/**
 * The kinds of host reach, most severe first. `toGuest`: the host's content ends up inside the
 * guest, where a hostile guest reads it (a model's config may name such a path only inside its
 * project). `neverProtected`: its path is refused in the places that hold credentials and
 * configuration for every caller, the user's own CLI included (a boot asset is not: an image's
 * files are confined to its own directory instead).
 */
export const HOST_REACH_KINDS = Object.freeze({
  credential: {
    title: "credential",
    what: "a host credential (an environment variable or a file) put into requests to the listed hosts",
    toGuest: false,
    neverProtected: false,
  },
  mount: { title: "mount", what: "a host directory the guest reads", toGuest: true, neverProtected: true },
  "host-file-read": {
    title: "host file read",
    what: "a host file read by the host",
    toGuest: true,
    neverProtected: true,
  },
  "host-file-write": {
    title: "host file write",
    what: "a host file written by the host",
    toGuest: false,
    neverProtected: false,
  },
  "host-port": {
    title: "host port",
    what: "a TCP service on the host's loopback the guest may connect to",
    toGuest: false,
    neverProtected: false,
  },
  "boot-asset": {
    title: "boot asset",
    what: "host files QEMU boots (kernel, initramfs, root disk)",
    toGuest: true,
    neverProtected: false,
  },
} as const);

/** One kind of host reach. */
export type HostReachKind = keyof typeof HOST_REACH_KINDS;

/** The kinds in order of severity, most severe first. */
export const HOST_REACH_ORDER = Object.freeze(Object.keys(HOST_REACH_KINDS) as HostReachKind[]);

/**
 * What a marked value is: `path` a host path (relative to the YAML, `~/`), `source` a secret
 * reference (`env:NAME`, or `file:PATH`, whose path is a host path), `text` host names or header
 * names, `port` port numbers.
 */
export type HostReachValue = "path" | "source" | "text" | "port";

/** The mark on a schema key that reaches the host. */
export interface HostReachMark {
  kind: HostReachKind;
  /** What the key's value is, as the start of a phrase: "value from", "sent to". */
  says: string;
  /** How its value is read. */
  value: HostReachValue;
}

/** Marks a schema key whose value reaches the host: put it in the key's `v.pipe`. */
export function reaches<TInput>(
  kind: HostReachKind,
  says: string,
  value: HostReachValue,
): v.MetadataAction<TInput, { hostReach: HostReachMark }> {
  return v.metadata<TInput, { hostReach: HostReachMark }>({ hostReach: { kind, says, value } });
}

/**
 * Marks a key that sounds like it reaches the host and does not (a guest path, a guest port), so
 * the schema walk's test knows it was considered. `why` is for the reader.
 */
export function reachesNothing<TInput>(why: string): v.MetadataAction<TInput, { hostReach: "none"; why: string }> {
  return v.metadata<TInput, { hostReach: "none"; why: string }>({ hostReach: "none", why });
}

/** The mark of `schema`: a mark, "none" ({@link reachesNothing}), or undefined (no mark). */
export function reachMarkOf(schema: v.GenericSchema): HostReachMark | "none" | undefined {
  const meta = v.getMetadata(schema as never) as Record<string, unknown>;
  return meta.hostReach as HostReachMark | "none" | undefined;
}

/** One marked value of a config. */
export interface ConfigReach extends HostReachMark {
  /** Where it is: `["network", "secrets", "TOKEN", "from"]`. */
  key: (string | number)[];
  /** The entry it belongs to, for grouping (`["network", "secrets", "TOKEN"]`, `["mounts", 0]`, `["image"]`). */
  group: (string | number)[];
  /** The value as the config holds it: a string, or a list of strings or ports. */
  given: string | number | (string | number)[];
}

/** A schema as the walk sees it (valibot's internals it relies on). */
interface WalkedSchema {
  type: string;
  wrapped?: WalkedSchema;
  entries?: Record<string, WalkedSchema>;
  value?: WalkedSchema;
  item?: WalkedSchema;
  options?: WalkedSchema[];
}

/**
 * Every marked key of `schema` with a value in `value`, in schema order. Records and arrays are
 * walked entry by entry; an entry (a secret, a mount) is the group of the marks inside it.
 */
export function marksOf(schema: v.GenericSchema, value: unknown): ConfigReach[] {
  const found: ConfigReach[] = [];
  const walk = (node: WalkedSchema, at: unknown, key: (string | number)[], group: (string | number)[] | undefined) => {
    if (at === undefined || at === null) return;
    const mark = reachMarkOf(node as unknown as v.GenericSchema);
    if (mark !== undefined && mark !== "none") {
      if (Array.isArray(at) && at.length === 0) return;
      found.push({ ...mark, key, group: group ?? key, given: at as ConfigReach["given"] });
      return;
    }
    switch (node.type) {
      case "optional":
      case "nullable":
      case "nullish":
      case "exact_optional":
        return walk(node.wrapped!, at, key, group);
      case "object":
      case "strict_object":
      case "loose_object":
        if (typeof at !== "object") return;
        for (const [name, entry] of Object.entries(node.entries!)) {
          walk(entry, (at as Record<string, unknown>)[name], [...key, name], group);
        }
        return;
      case "record":
        if (typeof at !== "object") return;
        for (const [name, entry] of Object.entries(at as Record<string, unknown>)) {
          walk(node.value!, entry, [...key, name], [...key, name]);
        }
        return;
      case "array":
        if (!Array.isArray(at)) return;
        at.forEach((entry: unknown, index) => walk(node.item!, entry, [...key, index], [...key, index]));
        return;
      default:
        return;
    }
  };
  walk(schema as unknown as WalkedSchema, value, [], undefined);
  return found;
}

/** The host path a marked value names, if any: a `path`, or the path of a `file:` source. */
export function reachPath(reach: Pick<ConfigReach, "value" | "given">): string | undefined {
  if (typeof reach.given !== "string") return undefined;
  if (reach.value === "path") return reach.given;
  if (reach.value === "source" && reach.given.startsWith("file:")) return reach.given.slice("file:".length);
  return undefined;
}

function shown(value: ConfigReach["given"]): string {
  return escapeControlChars(Array.isArray(value) ? value.join(", ") : String(value));
}

/**
 * One printable line per entry that reaches the host, most severe first: `network.secrets.TOKEN:
 * credential: value from env:TOKEN, sent to api.github.com`. Every value is escaped to one line.
 */
export function describeReaches(reaches: readonly ConfigReach[]): string[] {
  const groups = new Map<string, ConfigReach[]>();
  for (const reach of reaches) {
    const id = dottedPath(reach.group);
    groups.set(id, [...(groups.get(id) ?? []), reach]);
  }
  const rank = (list: ConfigReach[]) => Math.min(...list.map((r) => HOST_REACH_ORDER.indexOf(r.kind)));
  return [...groups.entries()]
    .sort(([, a], [, b]) => rank(a) - rank(b))
    .map(([id, list]) => {
      const kinds = [...new Set(list.map((r) => HOST_REACH_KINDS[r.kind].title))].join(", ");
      return `${escapeControlChars(id)} (${kinds}): ${list.map((r) => `${r.says} ${shown(r.given)}`).join(", ")}`;
    });
}

/**
 * Words that make a key or an argument look like it reaches the host: tests look for such keys
 * and arguments without a mark ({@link unmarkedKeys}, the controller's action-table test).
 */
export const SOUNDS_LIKE_HOST_REACH = /host|\bfiles?\b|credential|secret|\bports?\b|\bpath|director/i;

/** One key of a schema as {@link walkKeys} visits it. */
interface VisitedKey {
  /** Dotted, with `<name>` for a record's keys and `<n>` for list items. */
  key: string;
  /** Its mark, if it has one. */
  mark: HostReachMark | "none" | undefined;
  /** Its name and the descriptions on the way to it. */
  text: string;
}

/**
 * Visits every marked key of `schema` (without descending below it) and every unmarked leaf (a
 * value that is neither an object, a record, a list nor a union).
 */
function walkKeys(schema: v.GenericSchema, visit: (key: VisitedKey) => void): void {
  const walk = (node: WalkedSchema, key: (string | number)[], said: string) => {
    const mark = reachMarkOf(node as unknown as v.GenericSchema);
    const text = `${said} ${v.getDescription(node as never) ?? ""}`;
    if (mark !== undefined) return visit({ key: dottedPath(key), mark, text });
    switch (node.type) {
      case "optional":
      case "nullable":
      case "nullish":
      case "exact_optional":
        return walk(node.wrapped!, key, text);
      case "object":
      case "strict_object":
      case "loose_object":
        for (const [name, entry] of Object.entries(node.entries!)) walk(entry, [...key, name], name);
        return;
      case "record":
        return walk(node.value!, [...key, "<name>"], text);
      case "array":
        return walk(node.item!, [...key, "<n>"], text);
      case "union":
      case "variant":
        for (const option of node.options!) walk(option, key, text);
        return;
      default:
        visit({ key: dottedPath(key), mark: undefined, text });
    }
  };
  walk(schema as unknown as WalkedSchema, [], "");
}

/**
 * The dotted keys of `schema` whose name or description sounds like a host reach
 * ({@link SOUNDS_LIKE_HOST_REACH}) and that carry no mark, neither on themselves nor on a key
 * above them. Empty for a schema whose every such key was considered.
 */
export function unmarkedKeys(schema: v.GenericSchema): string[] {
  const unmarked = new Set<string>();
  walkKeys(schema, ({ key, mark, text }) => {
    if (mark === undefined && SOUNDS_LIKE_HOST_REACH.test(text)) unmarked.add(key);
  });
  return [...unmarked];
}

/** Every marked key of `schema` with its kind of reach, in schema order (`network.secrets.<name>.from`). */
export function markedKeys(schema: v.GenericSchema): { key: string; kind: HostReachKind }[] {
  const marked: { key: string; kind: HostReachKind }[] = [];
  walkKeys(schema, ({ key, mark }) => {
    if (mark !== undefined && mark !== "none") marked.push({ key, kind: mark.kind });
  });
  return marked;
}
