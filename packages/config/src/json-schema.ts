// The JSON Schema of sandbox.yaml for editors, converted from the valibot schema, and the URL it
// is published at.
import { toJsonSchema } from "@valibot/to-json-schema";
import { sandboxConfigSchema } from "./schema.js";

/**
 * Where the published schema can be fetched: the file this package ships, through the npm CDN
 * (a `# yaml-language-server: $schema=<this>` modeline works without installing anything).
 */
export const SANDBOX_SCHEMA_ID = "https://unpkg.com/@pi-sandbox/config/sandbox.schema.json";

/**
 * The JSON Schema (draft-07) of sandbox.yaml, generated from the schema `parseConfig` validates
 * with. Checks that JSON Schema cannot express (workspace escapes, reserved env names, Amp-only
 * text, and the cross-field rules) are left to `parseConfig`.
 */
export function sandboxJsonSchema(): Record<string, unknown> {
  const { $schema, ...rest } = toJsonSchema(sandboxConfigSchema, {
    target: "draft-07",
    ignoreActions: ["check", "metadata"],
  });
  // Unique host ports is a cross-field rule in parseConfig (rules.ts, so the issue points at the
  // repeat); JSON Schema states it as one keyword.
  const hostPorts = (rest.properties?.network as { properties?: Record<string, Record<string, unknown>> } | undefined)
    ?.properties?.hostPorts;
  if (hostPorts) hostPorts.uniqueItems = true;
  const secrets = (rest.properties?.network as { properties?: Record<string, Record<string, unknown>> } | undefined)
    ?.properties?.secrets;
  if (secrets) {
    secrets.examples = [{ GITHUB_TOKEN: { from: "env:GITHUB_TOKEN", hosts: ["api.github.com"] } }];
  }
  const mounts = rest.properties?.mounts as Record<string, unknown> | undefined;
  if (mounts) mounts.examples = [[{ host: "./docs", guest: "/mnt/docs" }]];
  return { $schema, $id: SANDBOX_SCHEMA_ID, ...rest };
}
