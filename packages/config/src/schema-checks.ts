// The building blocks every part of the sandbox.yaml schema uses: the "; got …" message maker,
// the shared patterns, and the checks that keep control characters and Amp-only text out.
import * as v from "valibot";
import { hasControlChars } from "./control-chars.js";
import { describeValue } from "./describe.js";

/** Builds a message that ends with "; got <the offending value>". */
export function got(text: string) {
  return (issue: { input: unknown }) => `${text}; got ${describeValue(issue.input)}`;
}

/** Amp's identity placeholder, in both `$X` and `${X}` spellings. */
export const AMP_EMAIL_PLACEHOLDER = /\$\{?AMP_USER_EMAIL\b/;

/** App paths (`/`, `/docs?x=1`, not `//host`) or absolute http(s) URLs. */
export const PREVIEW_URL_PATTERN = /^(?:\/(?:[^/\s]\S*)?|https?:\/\/[^/\s?#]+(?:[/?#]\S*)?)$/;

/** An exact host name or a `*.` wildcard over one; labels of letters, digits and inner hyphens. */
export const HOST_PATTERN =
  /^(?:\*\.)?(?=[^\s]{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** Names a shell accepts as environment variables. */
export const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

export const noAmpEmail = v.check(
  (text: string) => !AMP_EMAIL_PLACEHOLDER.test(text),
  "uses $AMP_USER_EMAIL, an Amp identity placeholder that does not exist in a local sandbox; write the text out instead",
);

// Preview labels are printed by the CLI and shown in Pi, and the guest's own .sandbox.yaml may be
// written by a prompt-injected model: terminal escape sequences are refused at the source (and
// escaped again wherever text is printed). A description may span lines; nothing else may.
export const noControlChars = v.check(
  (text: string) => !hasControlChars(text),
  got("must not contain control characters (such as ESC, BEL or a line break); write plain text"),
);
export const noControlCharsButLines = v.check(
  (text: string) => !hasControlChars(text, { multiline: true }),
  got("must not contain control characters (such as ESC or BEL) other than line breaks and tabs; write plain text"),
);
