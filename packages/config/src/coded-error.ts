// The error base every pi-sandbox package extends: a stable code, a message saying what happened,
// a hint saying what to do next, JSON-safe details, and one wire form.

/** Options of a {@link CodedError} (and of every package's error class). */
export interface CodedErrorOptions {
  /** What to do next, shown to users and models on its own line; never part of the message. */
  hint?: string;
  /** Structured, JSON-safe facts about the failure (paths, ports, names, ...). */
  details?: Record<string, unknown>;
  /** The underlying error, passed through untouched. */
  cause?: unknown;
}

/** The JSON form of any coded error: what the controller sends over its socket and the CLI prints. */
export interface CodedErrorJson {
  /** The class name (`VmError`, `ControllerError`, ...). */
  name: string;
  /** Stable code, prefixed with its package's name (`VM_`, `CONTROLLER_`, ...). */
  code: string;
  /** What happened. */
  message: string;
  /** What to do next; absent when there is nothing to add. */
  hint?: string;
  /** Structured facts; absent when empty. */
  details?: Record<string, unknown>;
}

const codedBrand = Symbol.for("pi-sandbox.CodedError");

/**
 * A failure with a stable `code` callers switch on. Each package extends it with its own class
 * and code union, and marks instances with its own `Symbol.for` brand ({@link brandError}) so its
 * `isXError()` guard also recognises an error from another installed copy of the package.
 */
export class CodedError<Code extends string = string> extends Error {
  override readonly name: string = "CodedError";
  /** Stable error code. */
  readonly code: Code;
  /** What to do next, or undefined when the message says it all. */
  readonly hint: string | undefined;
  /** Structured facts; empty when there are none. */
  readonly details: Record<string, unknown>;

  constructor(code: Code, message: string, options: CodedErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.hint = options.hint;
    this.details = options.details ?? {};
    brandError(this, codedBrand);
  }

  /** The `{name, code, message, hint?, details?}` form; hint and details only when present. */
  toJSON(): CodedErrorJson {
    const json: CodedErrorJson = { name: this.name, code: this.code, message: this.message };
    if (this.hint) json.hint = this.hint;
    if (Object.keys(this.details).length > 0) json.details = this.details;
    return json;
  }
}

/** Marks an error with a brand (a non-enumerable `Symbol.for` key) for {@link hasBrand}. */
export function brandError(error: Error, brand: symbol): void {
  Object.defineProperty(error, brand, { value: true });
}

/** True when `value` carries `brand`, whichever installed copy of a package made it. */
export function hasBrand(value: unknown, brand: symbol): boolean {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[brand] === true;
}

/** True for a CodedError of any pi-sandbox package, also one from another installed copy. */
export function isCodedError(value: unknown): value is CodedError {
  return hasBrand(value, codedBrand);
}

/** The message of any thrown value. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A package's error class and its guard, as {@link defineCodedError} makes them. */
export interface CodedErrorKind<Code extends string, Name extends string> {
  /**
   * The class the package declares its own on (`export class XError extends Base {}`): its
   * instances carry `name` and the package's brand.
   */
  Base: new (code: Code, message: string, options?: CodedErrorOptions) => CodedError<Code> & { readonly name: Name };
  /**
   * True for an instance, also one from another installed copy of the package; with `code`, only
   * for that code.
   */
  is(value: unknown, code?: Code): value is CodedError<Code> & { readonly name: Name };
  /** What the package's own codes start with (`CONFIG_`, `VM_`, ...). */
  prefix: string;
}

/**
 * Declares a package's error class once (CONTRIBUTING.md "Errors"): `name` (`ConfigError`, ...)
 * is the class's `name` and its `Symbol.for("pi-sandbox.<name>")` brand, so the guard also knows
 * an error of another installed copy of the package; `prefix` is what its own codes start with.
 */
export function defineCodedError<Code extends string, Name extends string>(
  name: Name,
  prefix: string,
): CodedErrorKind<Code, Name> {
  const brand = Symbol.for(`pi-sandbox.${name}`);
  class Base extends CodedError<Code> {
    override readonly name: Name = name;
    constructor(code: Code, message: string, options: CodedErrorOptions = {}) {
      super(code, message, options);
      brandError(this, brand);
    }
  }
  const is = (value: unknown, code?: Code): value is Base =>
    hasBrand(value, brand) && (code === undefined || (value as Base).code === code);
  return { Base, is, prefix };
}
