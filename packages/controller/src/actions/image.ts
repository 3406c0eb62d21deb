// `pi-sandbox image build|list|inspect|rm|import`: guest images from @pi-sandbox/image, kept by
// name in the user's cache, so `image: <name>` in sandbox.yaml finds them. Local actions: no
// daemon is involved; building and removing are the user's, never the model's.

import * as v from "valibot";
import {
  DEFAULT_FEATURES,
  DEFAULT_IMAGE_NAME,
  FEATURES,
  buildImage,
  imageCacheRoot,
  imageDir,
  importImage,
  inspectImage,
  listImages,
  removeImage,
  type BuildImageResult,
  type ImageDetails,
  type ImageSummary,
} from "@pi-sandbox/image";
import { ControllerError } from "../errors.js";
import type { StateLayout } from "../state/layout.js";
import { listEntryNames, readRecord } from "../state/records.js";
import { defineAction, type CliInput } from "./kit/define.js";
import { actionSchema, arg, intOption, positional, text } from "./kit/parts.js";
import { table } from "./kit/text.js";

/** A comma-separated option as a list (`--with node,bun`); undefined when not given. */
function listOption(value: CliInput["values"][string]): string[] | undefined {
  if (typeof value !== "string") return undefined;
  return value
    .split(",")
    .map((item) => item.trim())
    .filter(Boolean);
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(0)} MiB`;
}

const featureList = Object.entries(FEATURES)
  .map(([name, feature]) => `${name} (${feature.description})`)
  .join("; ");

/** `image build`: build (or reuse) an image from Debian packages and name it. */
export const imageBuild = defineAction({
  name: "image-build",
  summary: "build a guest image from Debian packages into your cache (reused when its inputs are unchanged)",
  args: [
    arg("name", "string", false, `image name, default ${DEFAULT_IMAGE_NAME}`),
    arg("with", "string[]", false, `features, default ${DEFAULT_FEATURES.join(",")}: ${featureList}`),
    arg("packages", "string[]", false, "more Debian (bookworm) packages"),
    arg("sizeGiB", "integer", false, "size of rootfs.ext4 in GiB; default: its content plus headroom"),
    arg("rebuild", "boolean", false, "build again even when the cache has these inputs"),
  ],
  route: "local",
  long: true,
  userOnly: true,
  schema: actionSchema("image-build", {
    name: v.optional(text),
    with: v.optional(v.array(text)),
    packages: v.optional(v.array(text)),
    sizeGiB: v.optional(v.pipe(v.number(), v.integer())),
    rebuild: v.optional(v.boolean()),
  }),
  cli: {
    usage: "image build [NAME] [--with a,b] [--packages a,b] [--size GiB]   build a guest image",
    options: {
      with: { type: "string", value: "a,b", description: "optional features, comma-separated (listed below)" },
      packages: { type: "string", value: "a,b", description: "more Debian packages, comma-separated" },
      size: { type: "string", value: "GiB", description: "the root filesystem's size" },
      rebuild: { type: "boolean", description: "build again even when an image of the same inputs exists" },
    },
    toAction: (input) => ({
      action: "image-build",
      name: input.positionals[0],
      with: listOption(input.values.with),
      packages: listOption(input.values.packages),
      sizeGiB: intOption(input.values.size, "--size"),
      rebuild: input.values.rebuild === true ? true : undefined,
    }),
    notes: [
      "Builds a Gondolin assets directory from Debian bookworm with debootstrap (root needed), plus",
      "Gondolin's guest helpers compiled with Zig from PyPI, into ${XDG_CACHE_HOME:-~/.cache}/pi-sandbox/images.",
      "The image id hashes every input: the same inputs give the same id, and a second build reuses",
      "the first offline. Then write `image: NAME` in sandbox.yaml. Without root: build on another",
      "Linux machine and `pi-sandbox image import DIR NAME` here.",
      `--with (comma-separated): ${featureList}.`,
      "--with '' builds the base image only (python3, openssh, e2fsprogs, curl, git, …).",
    ],
  },
  run: (args, ctx): Promise<BuildImageResult> =>
    buildImage({
      ...(args.name !== undefined ? { name: args.name } : {}),
      ...(args.with !== undefined ? { with: args.with } : {}),
      ...(args.packages !== undefined ? { packages: args.packages } : {}),
      ...(args.sizeGiB !== undefined ? { sizeGiB: args.sizeGiB } : {}),
      ...(args.rebuild ? { rebuild: true } : {}),
      env: ctx.env,
      onProgress: (message, seconds) =>
        ctx.progress
          ? ctx.progress({ stage: "image", message: `${seconds.trim()}s ${message}` })
          : process.stderr.write(`[image ${seconds}s] ${message}\n`),
    }),
  formatText: (result) =>
    `${result.reused ? "reused" : "built"} image ${result.name} (${result.id}): ${result.dir}\n` +
    `use it with \`image: ${result.name}\` in sandbox.yaml\n`,
  brief: (result) => `${result.name} ${result.reused ? "reused" : "built"}`,
});

/** `image list`: named images, then builds no name points at. */
export const imageList = defineAction({
  name: "image-list",
  summary: "guest images in your cache: name, id, size, features",
  args: [],
  route: "local",
  schema: actionSchema("image-list", {}),
  cli: {
    usage: "image list                           images you built or imported",
    aliases: ["images"],
    toAction: () => ({ action: "image-list" }),
  },
  run: async (_args, ctx): Promise<{ images: ImageSummary[] }> => ({
    images: await listImages(imageCacheRoot(ctx.env)),
  }),
  formatText: (result) =>
    result.images.length === 0
      ? "no images; build one with: pi-sandbox image build\n"
      : table([
          ["NAME", "ID", "ROOTFS", "FEATURES"],
          ...result.images.map((i) => [i.name ?? "(unnamed)", i.id, mib(i.rootfsBytes), i.features.join(",")]),
        ]),
  brief: (result) => `${result.images.length} image${result.images.length === 1 ? "" : "s"}`,
});

/** `image inspect`: an image's manifest, packages, tool versions and size. */
export const imageInspect = defineAction({
  name: "image-inspect",
  summary: "an image's directory, manifest, Debian packages, tool versions and size",
  args: [arg("name", "string", true, "image name (or id)")],
  route: "local",
  schema: actionSchema("image-inspect", { name: text }),
  cli: {
    usage: "image inspect NAME                   manifest, packages, tool versions, size",
    toAction: (input) => ({ action: "image-inspect", name: positional(input, 0, "an image name", "image inspect") }),
  },
  run: (args, ctx): Promise<ImageDetails> => inspectImage(imageCacheRoot(ctx.env), args.name),
  formatText: (d) =>
    [
      `name:     ${d.name ?? "(unnamed)"}`,
      `id:       ${d.id}`,
      `dir:      ${d.dir}`,
      `buildId:  ${String(d.manifest.buildId ?? "")}`,
      `features: ${d.features.join(", ") || "(none)"}`,
      `tools:    ${Object.entries(d.tools)
        .map(([tool, version]) => `${tool} ${version}`)
        .join(", ")}`,
      `size:     rootfs ${mib(d.rootfsBytes)}, ${mib(d.diskBytes)} on disk`,
      `packages: ${d.packages.length} (\`--json\` lists them)`,
      "",
    ].join("\n"),
});

/** Instances and templates whose recorded image is `dir`. */
async function usersOf(layout: StateLayout, dir: string): Promise<string[]> {
  const users: string[] = [];
  for (const kind of ["instances", "templates"] as const) {
    for (const entry of await listEntryNames(layout, kind)) {
      const record = await readRecord(layout, kind, entry).catch(() => undefined);
      if (record?.config.image === dir) users.push(kind === "templates" ? `template ${entry}` : entry);
    }
  }
  return users;
}

/** `image rm`: drop a name, and its build when nothing else uses it. */
export const imageRm = defineAction({
  name: "image-rm",
  summary: "remove an image name (its build too, unless another name or an instance uses it)",
  args: [
    arg("name", "string", true, "image name (or id)"),
    arg("force", "boolean", false, "remove even when instances or templates boot from it (they then cannot start)"),
  ],
  route: "local",
  userOnly: true,
  schema: actionSchema("image-rm", { name: text, force: v.optional(v.boolean()) }),
  cli: {
    usage: "image rm NAME [--force]              remove an image",
    options: { force: { type: "boolean", description: "remove it even when a sandbox.yaml or template may use it" } },
    toAction: (input) => ({
      action: "image-rm",
      name: positional(input, 0, "an image name", "image rm"),
      force: input.values.force === true ? true : undefined,
    }),
  },
  async run(args, ctx): Promise<{ name: string | null; id: string; deleted: boolean }> {
    const root = imageCacheRoot(ctx.env);
    const users = await usersOf(ctx.layout, await imageDir(root, args.name));
    if (users.length > 0 && !args.force) {
      const verb = users.length === 1 ? "boots" : "boot";
      throw new ControllerError("CONTROLLER_IMAGE_IN_USE", `${users.join(", ")} ${verb} from image ${args.name}`, {
        hint: `Destroy them first, or pass --force (they then cannot start until the image is back).`,
        details: { image: args.name, users },
      });
    }
    return removeImage(root, args.name);
  },
  formatText: (r) =>
    `removed ${r.name ?? r.id}${r.deleted ? "" : ` (build ${r.id} kept: another name points at it)`}\n`,
});

/** `image import`: register an assets directory built elsewhere. */
export const imageImport = defineAction({
  name: "image-import",
  summary: "check a Gondolin assets directory built elsewhere, copy it into your cache and name it",
  args: [
    arg("dir", "string", true, "the directory `image build` printed on the machine that built it", {
      kind: "host-file-read",
    }),
    arg("name", "string", false, `image name, default ${DEFAULT_IMAGE_NAME}`),
  ],
  route: "local",
  userOnly: true,
  schema: actionSchema("image-import", { dir: text, name: v.optional(text) }),
  cli: {
    usage: "image import DIR [NAME]              register an image built on another machine",
    toAction: (input) => ({
      action: "image-import",
      dir: positional(input, 0, "a directory", "image import"),
      name: input.positionals[1],
    }),
    notes: [
      "Checks the files Gondolin needs (vmlinuz-virt, initramfs.cpio.lz4, rootfs.ext4) against the",
      "sha256 checksums in its manifest.json, then copies the directory into your cache.",
    ],
  },
  run: (args, ctx): Promise<ImageSummary> =>
    importImage(imageCacheRoot(ctx.env), args.dir, args.name ?? DEFAULT_IMAGE_NAME),
  formatText: (i) => `imported image ${i.name} (${i.id}): ${i.dir}\nuse it with \`image: ${i.name}\` in sandbox.yaml\n`,
});

/** Every image action, in help order. */
export const IMAGE_ACTIONS = [imageBuild, imageList, imageInspect, imageRm, imageImport] as const;
