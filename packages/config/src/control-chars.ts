// Control characters in text that came from a guest. Everything inside a VM may be written by a
// prompt-injected model (ARCHITECTURE.md, "Trust boundary"), and a terminal obeys the escape
// sequences in what it prints: OSC 52 sets the user's clipboard, CSI sequences rewrite the screen,
// a carriage return hides the start of a line. So the config refuses control characters where
// text is a label (previews), and every printer (the CLI, Pi's renderer, the controller log)
// passes guest text through `escapeControlChars` before it reaches a terminal or a log line.

/** C0 controls (U+0000–U+001F), DEL (U+007F) and C1 controls (U+0080–U+009F). */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const CONTROL_GLOBAL = /[\u0000-\u001f\u007f-\u009f]/g;
/** The same, plus `\r\n` pairs matched as one unit so multi-line text can keep them. */
const CONTROL_OR_CRLF = /\r\n|[\u0000-\u001f\u007f-\u009f]/g;

const NAMED: Readonly<Record<string, string>> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/** Options of {@link escapeControlChars} and {@link hasControlChars}. */
export interface ControlCharOptions {
  /**
   * Multi-line text (command output, file content, log tails): `\n`, `\t` and `\r\n` stay as they
   * are. Otherwise (titles, names, one-line messages) they are escaped like every other control.
   */
  multiline?: boolean;
}

function visible(char: string): string {
  const named = NAMED[char];
  if (named !== undefined) return named;
  const code = char.charCodeAt(0);
  // C0 as `\x1b`; DEL and C1 as `\u009b`, which is also a valid JSON escape, so escaping JSON text
  // leaves it valid JSON of the same value (JSON.stringify already escapes C0 itself).
  return code < 0x20 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/**
 * Text safe to write to a terminal or one log line: every C0 and C1 control character and DEL is
 * replaced by a visible escape (`\x1b`, `\u009b`, `\n`), except `\n`, `\t` and `\r\n` with
 * `multiline`. Backslashes are left alone, so the result is for reading, not for unescaping.
 * Idempotent: escaping escaped text changes nothing.
 */
export function escapeControlChars(text: string, options: ControlCharOptions = {}): string {
  if (!CONTROL.test(text)) return text;
  if (!options.multiline) return text.replace(CONTROL_GLOBAL, visible);
  return text.replace(CONTROL_OR_CRLF, (match) =>
    match === "\r\n" || match === "\n" || match === "\t" ? match : visible(match),
  );
}

/** True when `text` holds a control character that {@link escapeControlChars} would escape. */
export function hasControlChars(text: string, options: ControlCharOptions = {}): boolean {
  if (!options.multiline) return CONTROL.test(text);
  return escapeControlChars(text, options) !== text;
}
