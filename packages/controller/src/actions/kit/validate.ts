// Checks an action call against its module's schema: the action's spec and typed arguments, or a
// CONTROLLER_BAD_INPUT error with the action's usage.
import * as v from "valibot";
import { ControllerError } from "../../errors.js";
import { assertName } from "../../state/layout.js";
import { actionUsage as usage, type ActionSpec } from "./define.js";
import { ACTIONS, findAction } from "./registry.js";

/** A validated action: its spec and the checked arguments. */
export interface ValidatedAction {
  /** The table entry. */
  spec: ActionSpec;
  /** The action object, `action` included. */
  args: Record<string, unknown> & { action: string };
}

/**
 * Turns what a user or model sent into a validated action. Accepts an object, or a string that
 * is JSON, empty, or the bare word `help`. `{}` means help.
 */
export function validateAction(input: unknown): ValidatedAction {
  let value = input;
  if (typeof value === "string") {
    const text = value.trim();
    if (text === "" || text === "help") value = {};
    else {
      try {
        value = JSON.parse(text);
      } catch (error) {
        throw new ControllerError("CONTROLLER_BAD_INPUT", `input is not valid JSON: ${(error as Error).message}`, {
          hint: 'Send one JSON object such as {"action":"list"}; {} returns help.',
        });
      }
    }
  }
  if (value === undefined || value === null) value = {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new ControllerError("CONTROLLER_BAD_INPUT", "input must be a JSON object", {
      hint: 'Send one JSON object such as {"action":"list"}; {} returns help.',
    });
  }
  const record = value as Record<string, unknown>;
  if (Object.keys(record).length === 0) record.action = "help";
  const actionName = record.action;
  if (typeof actionName !== "string") {
    throw new ControllerError("CONTROLLER_BAD_INPUT", 'the "action" field is missing or not a string', {
      hint: `Actions: ${ACTIONS.map((a) => a.name).join(", ")}. {} returns help.`,
    });
  }
  const spec = findAction(actionName);
  if (!spec) {
    throw new ControllerError("CONTROLLER_UNKNOWN_ACTION", `unknown action ${JSON.stringify(actionName)}`, {
      hint: `Actions: ${ACTIONS.map((a) => a.name).join(", ")}. {} returns help.`,
      details: { action: actionName },
    });
  }
  const result = v.safeParse(spec.schema, record, { abortEarly: false });
  if (!result.success) {
    const problems = result.issues.map((issue) => {
      const path = v.getDotPath(issue);
      // A strict object reports an extra key (expected "never") and a missing one alike.
      if (issue.type === "strict_object" && issue.received === "undefined") {
        return `missing argument "${path ?? "input"}"`;
      }
      if (issue.type === "strict_object" || (issue.kind === "schema" && issue.expected === "never")) {
        return `unexpected argument "${path ?? issue.input}"`;
      }
      return `${path ?? "input"}: ${issue.message}`;
    });
    throw new ControllerError("CONTROLLER_BAD_INPUT", `${spec.name}: ${problems.join("; ")}`, {
      hint: `${spec.name} takes ${usage(spec)}`,
      details: { action: spec.name, problems },
    });
  }
  const args = result.output as ValidatedAction["args"];
  if (args.name !== undefined) assertName(args.name);
  if (args.template !== undefined) assertName(args.template, "template");
  try {
    spec.refine?.(args);
  } catch (error) {
    if (error instanceof ControllerError && error.hint === undefined) {
      throw new ControllerError(error.code, error.message, {
        hint: `${spec.name} takes ${usage(spec)}`,
        details: error.details,
      });
    }
    throw error;
  }
  return { spec, args };
}
