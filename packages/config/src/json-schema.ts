import { toJsonSchema } from "@valibot/to-json-schema";
import { sandboxConfigSchema } from "./schema.js";

/**
 * The JSON Schema (draft-07) of sandbox.yaml, generated from the schema `parseConfig` validates
 * with. Checks that JSON Schema cannot express (workspace escapes, reserved env names, Amp-only
 * text, and the cross-field rules) are left to `parseConfig`.
 */
export function sandboxJsonSchema(): Record<string, unknown> {
  const { $schema, ...rest } = toJsonSchema(sandboxConfigSchema, { target: "draft-07", ignoreActions: ["check"] });
  return { $schema, ...rest };
}
