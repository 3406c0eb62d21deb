// What the tool accepts before validation, and a forgiving look at an action for display. The
// controller validates for real; nothing here rejects input.

/** The tool's validated parameters. */
export interface SandboxToolParams {
  /** One JSON action as text; `{}`, `help` or an empty string return help. */
  input: string;
}

/**
 * Maps what callers send onto `{ input: string }` before schema validation: a bare string (code
 * mode's `tools.sandbox('{"action":"list"}')`), an object action (`{ action: "list" }`), or an
 * `input` that arrived as an object instead of JSON text. Anything else passes through, so the
 * schema reports it.
 */
export function prepareSandboxArguments(raw: unknown): SandboxToolParams {
  if (typeof raw === "string") return { input: raw };
  if (raw === undefined || raw === null) return { input: "{}" };
  if (typeof raw !== "object" || Array.isArray(raw)) return raw as SandboxToolParams;
  const record = raw as Record<string, unknown>;
  if ("input" in record) {
    const input = record.input;
    if (input !== null && typeof input === "object") return { input: JSON.stringify(input) };
    return record as unknown as SandboxToolParams;
  }
  // `{}` or `{ action: … }`: the caller passed the action itself.
  if (Object.keys(record).length === 0 || typeof record.action === "string") return { input: JSON.stringify(record) };
  return record as unknown as SandboxToolParams;
}

/** The action and instance an input names, as far as they can be read. */
export interface ActionPeek {
  /** Action name; `help` for empty input, `?` when the input is not a readable action. */
  action: string;
  /** Instance or template name, when given as a string. */
  name?: string;
  /** `kind` argument, when given. */
  kind?: string;
  /** `pid` argument of exec-status and exec-kill. */
  pid?: string;
}

/** Reads the action and name out of an input without validating it (for labels and hints). */
export function peekAction(input: unknown): ActionPeek {
  let value = input;
  if (typeof value === "string") {
    const text = value.trim();
    if (text === "" || text === "help") return { action: "help" };
    try {
      value = JSON.parse(text);
    } catch {
      return { action: "?" };
    }
  }
  if (value === undefined || value === null) return { action: "help" };
  if (typeof value !== "object" || Array.isArray(value)) return { action: "?" };
  const record = value as Record<string, unknown>;
  if (Object.keys(record).length === 0) return { action: "help" };
  const peek: ActionPeek = { action: typeof record.action === "string" ? record.action : "?" };
  if (typeof record.name === "string") peek.name = record.name;
  if (typeof record.kind === "string") peek.kind = record.kind;
  if (typeof record.pid === "string") peek.pid = record.pid;
  return peek;
}
