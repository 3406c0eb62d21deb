// A sandbox.yaml sent to another machine: read and checked here, where its relative paths mean
// something. Each secret's source is read here and the value travels beside the text, which names
// an environment variable instead (the far side keeps the value in its controller's memory, never
// on its disk); a mount of a directory of this machine is refused (no such sharing across
// machines yet); an image path must be the other machine's absolute path or an image name there.

import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { basename } from "node:path";
import {
  LIMITS,
  configReaches,
  expandHome,
  parseConfig,
  parseSecretSource,
  readConfigText,
  yamlLib,
  type ConfigReach,
} from "@pi-sandbox/config";
import { ControllerError } from "../errors.js";

/** What goes with a call. */
export interface ShippedConfig {
  config: { text: string; name: string };
  /** The values, by the variable the shipped text names. */
  secrets: Record<string, string>;
  /** Where each value was read here (`env:NAME`, `file:/abs`), to read again for a later start. */
  sources: Record<string, string>;
}

/** Where a shipped secret's value waits on the far side. */
const SECRET_ENV = "PI_SANDBOX_CONTEXT_SECRET_";

function refused(context: string, message: string, hint: string, key?: ConfigReach["key"]): ControllerError {
  return new ControllerError("CONTROLLER_CONTEXT_REFUSED", message, {
    hint,
    details: { context, ...(key ? { key: key.join(".") } : {}) },
  });
}

/** A secret's value from this machine (the daemon's rules: one line, within the size limit). */
export async function readSecret(
  source: string,
  env: NodeJS.ProcessEnv,
  yamlPath: string,
  name: string,
): Promise<string> {
  const parsed = parseSecretSource(source);
  let value: string | undefined;
  if (parsed.kind === "env") value = env[parsed.name];
  else {
    const path = expandHome(parsed.path, env.HOME || homedir());
    const bytes = await readFile(path).catch(() => undefined);
    if (bytes && bytes.length <= LIMITS.secretValueMaxBytes) value = bytes.toString("utf8").replace(/\r?\n$/, "");
  }
  if (!value) {
    throw new ControllerError(
      "CONTROLLER_SECRET_UNAVAILABLE",
      `secret ${name} of ${yamlPath} could not be read on this machine from its source (${parsed.kind === "env" ? `env:${parsed.name}` : "a file"})`,
      {
        hint: "Secrets are read where you run pi-sandbox and sent to the other machine's controller: set it here.",
        details: { secret: name },
      },
    );
  }
  return value;
}

/** Reads `path` here and makes it ready for context `context`; CONTROLLER_CONTEXT_REFUSED for a laptop mount. */
export async function shipConfig(path: string, context: string, env: NodeJS.ProcessEnv): Promise<ShippedConfig> {
  const { text, sourcePath } = await readConfigText(path);
  // Checked here first: a bad file is reported against the path the user gave.
  const config = parseConfig(text, { sourcePath });
  const doc = yamlLib().parseDocument(text);
  const secrets: Record<string, string> = {};
  const sources: Record<string, string> = {};
  let n = 0;
  for (const reach of configReaches(config)) {
    const raw = doc.getIn(reach.key);
    if (reach.kind === "mount") {
      throw refused(
        context,
        `${sourcePath} mounts a directory of this machine (${reach.key.join(".")}); context ${context} is another machine and cannot see it`,
        "Remove the mount, or copy the files in with pi-sandbox cp after the create (or put them in the image or setup).",
        reach.key,
      );
    }
    if (reach.value === "source" && typeof raw === "string" && typeof reach.given === "string") {
      const name = String(reach.group.at(-1));
      const variable = `${SECRET_ENV}${n++}`;
      // The parsed value: a file's path made absolute against the YAML's directory.
      sources[variable] = reach.given;
      secrets[variable] = await readSecret(reach.given, env, sourcePath, name);
      doc.setIn(reach.key, `env:${variable}`);
      continue;
    }
    if (reach.value === "path" && typeof raw === "string" && !raw.startsWith("/")) {
      throw refused(
        context,
        `${reach.key.join(".")} of ${sourcePath} is a path of this machine (${raw}); context ${context} is another machine`,
        `Name an image that exists there (pi-sandbox image list --context ${context}; pi-sandbox image push NAME --context ${context} copies one), or give its absolute path there.`,
        reach.key,
      );
    }
    if (reach.value === "path" && reach.kind !== "boot-asset") {
      throw refused(
        context,
        `${reach.key.join(".")} of ${sourcePath} names a path of this machine; context ${context} is another machine`,
        "Remove it for this context.",
        reach.key,
      );
    }
  }
  return { config: { text: doc.toString(), name: basename(sourcePath) }, secrets, sources };
}
