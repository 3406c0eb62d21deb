// The table of every kind of host reach, the sandbox.yaml keys and action arguments marked with it,
// and who may grant it. README and ARCHITECTURE.md carry it; a test holds them to what the marks
// say, so a new key or argument shows up in the docs or fails the build.
import { configReachKeys, HOST_REACH_ORDER, type HostReachKind } from "@pi-sandbox/config";
import type { ActionSpec } from "./define.js";

/** Who may grant each kind of reach: a Record, so a new kind does not compile without its rule. */
export const HOST_REACH_GRANTS: Record<HostReachKind, { model: string; user: string }> = {
  credential: {
    model: "only after the user's yes to that config (its path, text and resolved reach)",
    user: "yes; `create` and `prepare` print one line naming it",
  },
  mount: {
    model: "after the user's yes to the config, and to a directory outside the project; a protected place never",
    user: "yes, except a protected place (refused for everyone)",
  },
  "host-file-read": {
    model:
      "inside the project, freely (a config's still needs the yes to the config); outside it, after a yes; a protected place never",
    user: "yes; a file whose text goes into the guest (`placeholderFrom`) never from a protected place",
  },
  "host-file-write": {
    model:
      "inside the project, freely, except where code runs or with an exec bit; those, outside the project and protected places after a yes",
    user: "yes",
  },
  "host-port": {
    model: "only after the user's yes to that config",
    user: "yes; `create` and `prepare` print one line naming it",
  },
  "boot-asset": {
    model:
      "an image in the user's image store (by name or path), freely; any other after the user's yes to the config, and to a path outside the project",
    user: "yes; the kernel, initramfs and rootfs must lie inside the image directory",
  },
};

/** One row per kind, most severe first: the kind, what is marked with it, and who may grant it. */
export function hostReachRows(actions: readonly ActionSpec[]): string[][] {
  const keys = configReachKeys();
  return HOST_REACH_ORDER.map((kind) => {
    const marked = [
      ...keys.filter((k) => k.kind === kind).map((k) => `\`${k.key}\``),
      ...actions.flatMap((spec) =>
        spec.args
          .filter((a) => a.reach !== undefined && a.reach !== "none" && a.reach.kind === kind)
          .map((a) => `\`${spec.name}.${a.name}\``),
      ),
    ];
    return [kind, marked.join(", "), HOST_REACH_GRANTS[kind].model, HOST_REACH_GRANTS[kind].user];
  });
}

/** The table as Markdown (Prettier may pad its columns; the rows' cells are what count). */
export function renderHostReachTable(actions: readonly ActionSpec[]): string {
  const head = ["host reach", "marked on", "the model (the `sandbox` tool)", "the user (CLI, libraries, `/sandbox`)"];
  const row = (cells: string[]) => `| ${cells.join(" | ")} |`;
  return [row(head), row(head.map(() => "---")), ...hostReachRows(actions).map(row)].join("\n");
}
