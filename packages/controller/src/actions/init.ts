// `pi-sandbox init`: a commented sandbox.yaml to start from, like devcontainer and Lima templates:
// the schema modeline for editors, an image from `image list`, one service with a preview, and
// the network keys commented out. It never overwrites a file.

import { writeFile } from "node:fs/promises";
import { basename } from "node:path";
import * as v from "valibot";
import { SANDBOX_SCHEMA_ID, parseConfig } from "@pi-sandbox/config";
import { DEFAULT_IMAGE_NAME, imageCacheRoot, listImages } from "@pi-sandbox/image";
import { ControllerError } from "../errors.js";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, intOption, port, text } from "./kit/parts.js";

/** The service command `init` writes when none is given: a static server of the workspace. */
export const DEFAULT_SERVICE_COMMAND = "python3 -m http.server $PORT --bind 127.0.0.1";

/** What goes into the template. */
export interface InitChoices {
  /** The image name to write, and whether it is built already. */
  image: { name: string; built: boolean };
  /** The web service's command. */
  serviceCommand: string;
  /** A fixed guest port, else none (pi-sandbox picks one and passes it as $PORT). */
  port?: number;
}

function imageLines(image: InitChoices["image"]): string[] {
  const why = image.built
    ? "# A guest image: a name from `pi-sandbox image list`, or a path to a Gondolin assets directory."
    : `# A guest image. None is built yet: run \`pi-sandbox image build\` first (it names the image ${image.name}).`;
  return [why, `image: ${image.name}`];
}

/** The text of a commented sandbox.yaml for `choices`. */
export function renderInitTemplate(choices: InitChoices): string {
  const lines = [
    `# yaml-language-server: $schema=${SANDBOX_SCHEMA_ID}`,
    "# One pi-sandbox environment. Every key: https://www.npmjs.com/package/@pi-sandbox/config",
    "# Check it with `pi-sandbox doctor -c sandbox.yaml`, then `pi-sandbox create NAME -c sandbox.yaml`.",
    "version: 1",
    "",
    ...imageLines(choices.image),
    "",
    "# CPUs and memory: tiny (1, 2 GiB), small (2, 4), medium (4, 8), large (8, 16), xlarge (16, 32).",
    "profile: small",
    "# The disk, sparse: it takes only what the guest writes.",
    "diskGiB: 8",
    "",
    "# Run once when an instance is created, in /workspace (here: a page for the web service).",
    "setup:",
    `  - printf 'Hello from the guest\\n' > /workspace/index.html`,
    "",
    "services:",
    "  web:",
    "    # Stays in the foreground; $PORT is the port it must listen on in the guest.",
    `    command: ${JSON.stringify(choices.serviceCommand)}`,
    ...(choices.port !== undefined
      ? ["    # A fixed guest port (omit it and one is chosen for you).", `    port: ${choices.port}`]
      : []),
    "    # Ready once GET / answers 2xx/3xx.",
    "    health: /",
    "    # A stable URL on your machine, http://127.a.b.c:<port>/ (`pi-sandbox inspect NAME` shows it).",
    "    preview: true",
    "",
    "# The guest reaches nothing outside by default. Hosts it may reach over HTTP(S):",
    "# network:",
    "#   allowedHosts: [registry.npmjs.org, pypi.org, files.pythonhosted.org, '*.github.com']",
    "",
  ];
  return lines.join("\n");
}

/** The image to name: `default` when built, else the first built one, else `default` (to build). */
async function pickImage(env: NodeJS.ProcessEnv): Promise<InitChoices["image"]> {
  const named = (await listImages(imageCacheRoot(env))).flatMap((image) => (image.name ? [image.name] : []));
  if (named.includes(DEFAULT_IMAGE_NAME)) return { name: DEFAULT_IMAGE_NAME, built: true };
  if (named[0] !== undefined) return { name: named[0], built: true };
  return { name: DEFAULT_IMAGE_NAME, built: false };
}

/** `init`: write a commented sandbox.yaml (never over an existing file). */
export const init = defineAction({
  name: "init",
  summary: "write a commented sandbox.yaml to start from (never overwrites)",
  args: [
    arg("config", "string", false, "where to write it, default sandbox.yaml in the current directory", {
      kind: "host-file-write",
    }),
    arg("serviceCommand", "string", false, `the web service's command, default ${DEFAULT_SERVICE_COMMAND}`, "none"),
    arg("port", "integer", false, "a fixed guest port for it (default: chosen for you, passed as $PORT)", "none"),
  ],
  route: "local",
  userOnly: true,
  schema: actionSchema("init", { config: v.optional(text), serviceCommand: v.optional(text), port: v.optional(port) }),
  cli: {
    usage: "init [--service-command CMD] [--port N]   write a commented sandbox.yaml",
    options: {
      config: { type: "string", short: "c", value: "file", description: "where to write it (default ./sandbox.yaml)" },
      "service-command": { type: "string", value: "CMD", description: "the command of a service to declare" },
      port: { type: "string", value: "N", description: "the port that service listens on" },
    },
    toAction: (input) => ({
      action: "init",
      config: input.values.config,
      serviceCommand: input.values["service-command"],
      port: intOption(input.values.port, "--port"),
    }),
  },
  async run(args, ctx): Promise<{ path: string; image: string; imageBuilt: boolean }> {
    const path = args.config ?? `${ctx.cwd}/sandbox.yaml`;
    const image = await pickImage(ctx.env);
    const text = renderInitTemplate({
      image,
      serviceCommand: args.serviceCommand ?? DEFAULT_SERVICE_COMMAND,
      ...(args.port !== undefined ? { port: args.port } : {}),
    });
    parseConfig(text, { sourcePath: path });
    try {
      await writeFile(path, text, { flag: "wx", mode: 0o644 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      throw new ControllerError("CONTROLLER_FILE_EXISTS", `${path} exists already; init never overwrites a file`, {
        hint: `Edit it, or move it away and run init again (or write elsewhere with -c other.yaml).`,
        details: { path },
      });
    }
    return { path, image: image.name, imageBuilt: image.built };
  },
  formatText: (r) =>
    `wrote ${r.path}\n` +
    (r.imageBuilt
      ? ""
      : `build its image first: pi-sandbox image build${r.image === DEFAULT_IMAGE_NAME ? "" : ` ${r.image}`}\n`) +
    `then: pi-sandbox create NAME -c ${basename(r.path)}\n`,
});
