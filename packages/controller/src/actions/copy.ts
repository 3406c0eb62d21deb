// upload and download: files and directories between the host and a guest (`pi-sandbox cp`).

import * as v from "valibot";
import { UsageError, defineAction, type CliInput } from "./kit/define.js";
import { download as downloadTree } from "./copy-download.js";
import { COPY_FILE_MAX_BYTES, COPY_MAX_ENTRIES, guestPath, type CopyResult } from "./copy-tree.js";
import { upload as uploadTree } from "./copy-upload.js";
import { actionSchema, arg, GUEST_PATH, name, nameArg, text } from "./kit/parts.js";
import { hostPlaces } from "../host-places.js";
import { oneLine } from "./kit/text.js";

const paths = v.union([text, v.pipe(v.array(text), v.minLength(1))]);
const list = (value: string | string[]) => (Array.isArray(value) ? value : [value]);
const limits = `files up to ${COPY_FILE_MAX_BYTES / 1024 / 1024} MiB each, directories recursively (at most ${COPY_MAX_ENTRIES} entries); links and special files are skipped`;

/** `name:path` on the command line: a guest path of instance `name`. */
const GUEST_WORD = /^([a-z][a-z0-9-]{0,39}):(.*)$/s;

/** `pi-sandbox cp <src>… <dst>`: one side is `<name>:<guest path>`, the other host paths. */
function cpAction(input: CliInput): Record<string, unknown> {
  if (input.positionals.length < 2) throw new UsageError("cp needs a source and a destination");
  const words = input.positionals;
  const parsed = words.map((word) => {
    const match = GUEST_WORD.exec(word);
    return match ? { name: match[1]!, path: match[2] || "." } : { path: word };
  });
  const dst = parsed.at(-1)!;
  const srcs = parsed.slice(0, -1);
  const guestSide = "name" in dst ? [dst] : srcs;
  const names = new Set(parsed.filter((p) => "name" in p).map((p) => (p as { name: string }).name));
  if (names.size !== 1 || guestSide.some((p) => !("name" in p)) || srcs.some((p) => "name" in p) === "name" in dst) {
    throw new UsageError(
      "cp copies between the host and one instance: either every source is <name>:<guest path> and the destination a host path, or the reverse (use ./a:b for a host path with a colon)",
    );
  }
  const instance = [...names][0]!;
  return {
    action: "name" in dst ? "upload" : "download",
    name: instance,
    from: srcs.map((p) => p.path),
    to: dst.path,
  };
}

function formatCopy(result: CopyResult): string {
  const what = [
    `${result.files} file${result.files === 1 ? "" : "s"}`,
    ...(result.directories ? [`${result.directories} director${result.directories === 1 ? "y" : "ies"}`] : []),
    `${result.bytes} bytes`,
  ].join(", ");
  const lines = [
    `copied ${what} to ${result.direction === "upload" ? `${oneLine(result.name)}:` : ""}${oneLine(result.to)}`,
  ];
  if (result.sha256) lines.push(`sha256 ${result.sha256} (verified)`);
  if (result.skippedCount > 0) {
    const named = result.skipped.map((s) => `${oneLine(s.path)} (${s.type})`).join(", ");
    lines.push(
      `skipped ${result.skippedCount} link(s) or special file(s): ${named}${result.skippedCount > result.skipped.length ? ", …" : ""}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

const briefCopy = (result: CopyResult) => `${result.files} file(s), ${result.bytes} bytes`;

/** `upload`: host files and directories into the guest. */
export const upload = defineAction({
  name: "upload",
  summary: `copy host files or directories into the guest (${limits}; each file verified)`,
  args: [
    nameArg,
    arg("from", "string | string[]", true, "host paths, relative to the caller's directory", {
      kind: "host-file-read",
    }),
    arg(
      "to",
      "string",
      true,
      "guest path, absolute or relative to the workspace; an existing directory receives the sources by name",
      GUEST_PATH,
    ),
  ],
  route: "daemon",
  schema: actionSchema("upload", { name, from: paths, to: text }),
  cli: {
    usage: "cp <src>… <dst>   copy files and directories; one side is <name>:<guest path>",
    aliases: ["cp"],
    alsoBuilds: ["download"],
    completesRemote: true,
    toAction: cpAction,
    notes: [
      "pi-sandbox cp ./app demo:/workspace/     host to guest (upload)",
      "pi-sandbox cp demo:out/report.pdf .      guest to host (download); guest paths are relative to the workspace",
      "Like cp -r: into an existing directory each source keeps its name; otherwise the destination is",
      "the copy (one source only). Binary-safe; each file is at most 256 MiB and arrives verified (by",
      "sha256, or by CRC-32 through the instance's transfer disk; written under a temporary name, then",
      "renamed). Links and special files are skipped and listed. A progress bar shows on a terminal.",
      "Ctrl-C stops the copy; the file in flight is discarded.",
    ],
  },
  run: async (args, ctx) => {
    const supervisor = ctx.guest.supervisor();
    return uploadTree(supervisor.files, ctx.name, list(args.from), guestPath(supervisor.workspace, args.to), {
      intoDirectory: args.to.endsWith("/"),
      progress: ctx.progress,
      signal: ctx.signal,
    });
  },
  formatText: formatCopy,
  brief: briefCopy,
});

/** `download`: guest files and directories to the host. */
export const download = defineAction({
  name: "download",
  summary: `copy guest files or directories to the host (${limits}; each file verified)`,
  args: [
    nameArg,
    arg("from", "string | string[]", true, "guest paths, absolute or relative to the workspace", GUEST_PATH),
    arg(
      "to",
      "string",
      true,
      "host path, relative to the caller's directory; an existing directory receives the sources by name",
      { kind: "host-file-write" },
    ),
  ],
  route: "daemon",
  schema: actionSchema("download", { name, from: paths, to: text }),
  run: async (args, ctx) => {
    const supervisor = ctx.guest.supervisor();
    const sources = list(args.from).map((path) => guestPath(supervisor.workspace, path));
    return downloadTree(supervisor.files, ctx.name, sources, args.to.replace(/(.)\/+$/, "$1"), {
      intoDirectory: args.to.endsWith("/"),
      progress: ctx.progress,
      signal: ctx.signal,
      guard: ctx.guard && { limits: ctx.guard, places: await hostPlaces(ctx.stateRoot) },
    });
  },
  formatText: formatCopy,
  brief: briefCopy,
});
