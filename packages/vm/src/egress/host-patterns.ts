// Host-name patterns as Gondolin matches them (`host/patterns.js`, not exported by Gondolin): the
// allow-list check of the egress policy and the host check of a secret's destination use it.

/** Gondolin's own matching: `*` alone or as a wildcard, case-insensitive. */
export function isHostAllowed(hostname: string, patterns: readonly string[]): boolean {
  const name = hostname.toLowerCase();
  return patterns.some((pattern) => {
    if (!pattern) return false;
    if (pattern === "*") return true;
    const regex = pattern
      .split("*")
      .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
      .join(".*");
    return new RegExp(`^${regex}$`, "i").test(name);
  });
}
