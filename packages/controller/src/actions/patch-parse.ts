// A git patch from the guest, read on the host before anything prints or applies it: the guest
// is untrusted, so its patch is too. `patchText` accepts only printable UTF-8 (the guest diffs
// every other file as binary, so a real patch always is); `parsePatch` reads it as strictly as
// `git diff --binary -M --full-index` writes it and lists the files it touches, their status and
// line counts; patch-apply.ts adds the path rules a patch must keep to before it is applied.

import { hasControlChars } from "@pi-sandbox/config";
import { ControllerError } from "../errors.js";

/** Most files one patch may touch. */
export const PATCH_FILES_MAX = 20_000;

/** What a patch does to one file. */
export type PatchFileStatus = "added" | "deleted" | "modified" | "renamed" | "copied";

/** One file of a patch. */
export interface PatchFile {
  /** Its path, relative to the workspace (for a deleted file, the path it had). */
  path: string;
  /** The path it was renamed or copied from. */
  oldPath?: string;
  status: PatchFileStatus;
  /** Given as a binary patch (content that is not printable UTF-8 text, in either version). */
  binary: boolean;
  /** Lines added (0 for binary). */
  added: number;
  /** Lines removed (0 for binary). */
  deleted: number;
  /** The mode it had, when the patch says (`100644`, `100755`, `120000` a symlink). */
  oldMode?: string;
  /** The mode it gets, when the patch says. */
  newMode?: string;
  /** For a symlink the patch writes: the target it gets. */
  symlink?: string;
}

/** A parsed patch. */
export interface ParsedPatch {
  files: PatchFile[];
  /** Lines added, all files. */
  added: number;
  /** Lines removed, all files. */
  deleted: number;
}

/** The modes git records; a gitlink (160000) or anything else is refused. */
const MODES = new Set(["100644", "100755", "120000"]);
const SYMLINK = "120000";

/** The error of a patch that is not what the guest's git makes: nothing prints or applies it. */
export function patchRefused(message: string, details?: Record<string, unknown>): ControllerError {
  return new ControllerError("CONTROLLER_PATCH_REFUSED", message, {
    hint: "The guest's patch was refused and nothing was changed. Look at the guest workspace (exec, read); copy single files with pi-sandbox cp if you need them.",
    ...(details ? { details } : {}),
  });
}

/**
 * The patch as text: valid UTF-8 with no control characters but line breaks, tabs and `\r\n`,
 * so it prints as it is and a terminal obeys nothing in it. Throws CONTROLLER_PATCH_REFUSED.
 */
export function patchText(bytes: Buffer): string {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw patchRefused("the guest's patch is not UTF-8 text");
  }
  if (hasControlChars(text, { multiline: true })) {
    throw patchRefused(
      "the guest's patch holds control characters (its git marks such files binary, so it was altered)",
    );
  }
  return text;
}

const ESCAPES: Readonly<Record<string, number>> = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, "\\": 92 };

/** A C-quoted name (git's `core.quotePath`) starting at `start` (a `"`): its value and where it ends. */
function readQuoted(s: string, start: number, line: number): { value: string; end: number } {
  const bytes: number[] = [];
  for (let i = start + 1; i < s.length; i++) {
    const c = s[i]!;
    if (c === '"') {
      let value: string;
      try {
        value = new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(bytes));
      } catch {
        throw patchRefused(`line ${line} of the patch names a path that is not UTF-8`);
      }
      return { value, end: i + 1 };
    }
    if (c !== "\\") {
      bytes.push(...Buffer.from(c, "utf8"));
      continue;
    }
    const next = s[++i] ?? "";
    const octal = /^[0-3][0-7]{2}/.exec(s.slice(i, i + 3));
    if (octal) {
      bytes.push(Number.parseInt(octal[0], 8));
      i += 2;
    } else if (ESCAPES[next] !== undefined) bytes.push(ESCAPES[next]);
    else throw patchRefused(`line ${line} of the patch has a bad escape in a quoted path`);
  }
  throw patchRefused(`line ${line} of the patch has an unterminated quoted path`);
}

/** A whole name field: quoted, or the rest as it is. */
function nameField(s: string, line: number): string {
  if (!s.startsWith('"')) return s;
  const quoted = readQuoted(s, 0, line);
  if (quoted.end !== s.length) throw patchRefused(`line ${line} of the patch has text after a quoted path`);
  return quoted.value;
}

/** `--- a/x` / `+++ b/x` names: undefined for /dev/null. Git ends a name holding a space with a tab. */
function markerName(s: string, prefix: "a/" | "b/", line: number): string | undefined {
  const field = s.endsWith("\t") ? s.slice(0, -1) : s;
  if (field === "/dev/null") return undefined;
  const name = nameField(field, line);
  if (!name.startsWith(prefix)) throw patchRefused(`line ${line} of the patch names a path without ${prefix}`);
  return name.slice(prefix.length);
}

/** The two names of `diff --git a/X b/Y`, when they can be told apart (always, unless renamed with spaces). */
function gitNames(rest: string, line: number): { a?: string; b?: string } {
  const strip = (name: string, prefix: string) => {
    if (!name.startsWith(prefix)) throw patchRefused(`line ${line} of the patch names a path without ${prefix}`);
    return name.slice(prefix.length);
  };
  if (rest.startsWith('"')) {
    const a = readQuoted(rest, 0, line);
    if (rest[a.end] !== " ") throw patchRefused(`line ${line} of the patch is not a diff --git line`);
    return { a: strip(a.value, "a/"), b: strip(nameField(rest.slice(a.end + 1), line), "b/") };
  }
  const quotedB = rest.indexOf(' "b/');
  if (quotedB > 0)
    return { a: strip(rest.slice(0, quotedB), "a/"), b: strip(nameField(rest.slice(quotedB + 1), line), "b/") };
  // Unquoted: the same name twice ("a/X b/X") is the only reading that is sure.
  const n = (rest.length - 5) / 2;
  if (Number.isInteger(n) && n > 0 && rest.startsWith("a/") && rest.slice(2 + n, 5 + n) === " b/") {
    const a = rest.slice(2, 2 + n);
    if (a === rest.slice(5 + n)) return { a, b: a };
  }
  return {};
}

/** One file's section as read. */
interface Section {
  line: number;
  git: { a?: string; b?: string };
  oldMode?: string;
  newMode?: string;
  indexMode?: string;
  created?: boolean;
  deleted?: boolean;
  renameFrom?: string;
  renameTo?: string;
  copyFrom?: string;
  copyTo?: string;
  minus?: string | null;
  plus?: string | null;
  binary: boolean;
  hunks: boolean;
  added: number;
  removed: number;
  plusLines: string[];
}

const BASE85_LINE = /^[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+$/;

/**
 * Reads a patch as `git diff --binary -M --full-index` writes it: a section per file, its
 * extended headers, then hunks, a binary patch, or nothing (a mode change, a pure rename, an empty
 * file). Anything else is refused (CONTROLLER_PATCH_REFUSED): a guest could write a patch that git
 * apply and this reader see differently, so the apply also checks git's own reading against it.
 */
export function parsePatch(text: string): ParsedPatch {
  if (text === "") return { files: [], added: 0, deleted: 0 };
  if (!text.endsWith("\n")) throw patchRefused("the guest's patch does not end with a line break");
  const lines = text.slice(0, -1).split("\n");
  const sections: Section[] = [];
  let i = 0;
  const at = () => lines[i];
  while (i < lines.length) {
    const header = lines[i]!;
    if (!header.startsWith("diff --git "))
      throw patchRefused(`line ${i + 1} of the patch is not where a file's patch starts`);
    if (sections.length >= PATCH_FILES_MAX) {
      throw patchRefused(`the patch touches more than ${PATCH_FILES_MAX} files`, { max: PATCH_FILES_MAX });
    }
    const s: Section = {
      line: i + 1,
      git: gitNames(header.slice(11), i + 1),
      binary: false,
      hunks: false,
      added: 0,
      removed: 0,
      plusLines: [],
    };
    sections.push(s);
    i++;
    for (; i < lines.length; i++) {
      const line = lines[i]!;
      const n = i + 1;
      let m: RegExpExecArray | null;
      if ((m = /^old mode (\d{6})$/.exec(line))) s.oldMode = m[1];
      else if ((m = /^new mode (\d{6})$/.exec(line))) s.newMode = m[1];
      else if ((m = /^deleted file mode (\d{6})$/.exec(line))) {
        s.deleted = true;
        s.oldMode = m[1];
      } else if ((m = /^new file mode (\d{6})$/.exec(line))) {
        s.created = true;
        s.newMode = m[1];
      } else if (line.startsWith("rename from ")) s.renameFrom = nameField(line.slice(12), n);
      else if (line.startsWith("rename to ")) s.renameTo = nameField(line.slice(10), n);
      else if (line.startsWith("copy from ")) s.copyFrom = nameField(line.slice(10), n);
      else if (line.startsWith("copy to ")) s.copyTo = nameField(line.slice(8), n);
      else if (/^(dis)?similarity index \d{1,3}%$/.test(line)) continue;
      else if ((m = /^index [0-9a-f]{40}\.\.[0-9a-f]{40}(?: (\d{6}))?$/.exec(line))) s.indexMode = m[1];
      else break;
    }
    const content = at();
    if (content?.startsWith("--- ")) {
      const plus = lines[i + 1];
      if (plus === undefined || !plus.startsWith("+++ "))
        throw patchRefused(`line ${i + 2} of the patch should be a +++ line`);
      s.minus = markerName(content.slice(4), "a/", i + 1) ?? null;
      s.plus = markerName(plus.slice(4), "b/", i + 2) ?? null;
      i += 2;
      if (!at()?.startsWith("@@ ")) throw patchRefused(`line ${i + 1} of the patch should start a hunk`);
      while (at()?.startsWith("@@ ")) i = readHunk(lines, i, s);
    } else if (content === "GIT binary patch") {
      s.binary = true;
      i = readBinary(lines, i + 1);
      if (/^(literal|delta) \d+$/.test(at() ?? "")) i = readBinary(lines, i);
    } else if (content !== undefined && !content.startsWith("diff --git ")) {
      throw patchRefused(`line ${i + 1} of the patch is neither a header nor content git writes`, {
        line: i + 1,
      });
    }
  }
  const files = sections.map(toFile);
  return {
    files,
    added: files.reduce((sum, f) => sum + f.added, 0),
    deleted: files.reduce((sum, f) => sum + f.deleted, 0),
  };
}

/** Reads one hunk from its `@@` line; returns the index after it. */
function readHunk(lines: readonly string[], start: number, s: Section): number {
  const m = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/.exec(lines[start]!);
  if (!m) throw patchRefused(`line ${start + 1} of the patch is not a hunk header`);
  let oldLeft = m[2] === undefined ? 1 : Number(m[2]);
  let newLeft = m[4] === undefined ? 1 : Number(m[4]);
  s.hunks = true;
  let i = start + 1;
  while (oldLeft > 0 || newLeft > 0) {
    const line = lines[i];
    if (line === undefined) throw patchRefused(`the patch ends inside the hunk at line ${start + 1}`);
    const c = line[0];
    if (c === " " || line === "") {
      oldLeft--;
      newLeft--;
    } else if (c === "-") {
      oldLeft--;
      s.removed++;
    } else if (c === "+") {
      newLeft--;
      s.added++;
      s.plusLines.push(line.slice(1));
    } else if (c !== "\\") throw patchRefused(`line ${i + 1} of the patch is not a hunk line`);
    if (oldLeft < 0 || newLeft < 0)
      throw patchRefused(`the hunk at line ${start + 1} of the patch is longer than it says`);
    i++;
  }
  while (lines[i]?.startsWith("\\")) i++;
  return i;
}

/** Reads one block of a binary patch (`literal N` or `delta N`, data lines, a blank line). */
function readBinary(lines: readonly string[], start: number): number {
  if (!/^(literal|delta) \d+$/.test(lines[start] ?? "")) {
    throw patchRefused(`line ${start + 1} of the patch should start a binary block`);
  }
  let i = start + 1;
  while (lines[i] !== undefined && lines[i] !== "") {
    if (!BASE85_LINE.test(lines[i]!)) throw patchRefused(`line ${i + 1} of the patch is not binary patch data`);
    i++;
  }
  if (lines[i] !== "") throw patchRefused(`the binary block at line ${start + 1} of the patch is not closed`);
  return i + 1;
}

/** One section as a file: its paths worked out and checked against each other. */
function toFile(s: Section): PatchFile {
  const refuse = (why: string) => patchRefused(`the patch's file at line ${s.line} ${why}`, { line: s.line });
  for (const mode of [s.oldMode, s.newMode, s.indexMode]) {
    if (mode !== undefined && !MODES.has(mode)) throw refuse(`has mode ${mode}, which is not a file or symlink`);
  }
  if ((s.oldMode === SYMLINK) !== (s.newMode === SYMLINK) && s.oldMode && s.newMode) {
    throw refuse("turns a symlink into a file or back in one step, which git never writes");
  }
  if (s.minus === null) s.created = true;
  if (s.plus === null) s.deleted = true;
  if (s.created && s.deleted) throw refuse("is both new and deleted");
  const rename = s.renameFrom !== undefined || s.renameTo !== undefined;
  const copy = s.copyFrom !== undefined || s.copyTo !== undefined;
  if (rename && copy) throw refuse("is both renamed and copied");
  if ((rename || copy) && (s.created || s.deleted)) throw refuse("is renamed or copied and also new or deleted");
  const from = s.renameFrom ?? s.copyFrom;
  const to = s.renameTo ?? s.copyTo;
  if ((rename || copy) && (from === undefined || to === undefined)) throw refuse("lacks the other name of its rename");
  const oldPath = from ?? (s.created ? undefined : (s.minus ?? s.git.a));
  const newPath = to ?? (s.deleted ? undefined : (s.plus ?? s.git.b));
  // Every name the section gives must agree (git apply holds them to the same).
  const agree = (name: string | null | undefined, path: string | undefined) =>
    name === undefined || name === null || name === path;
  if (!agree(s.minus, oldPath) || !agree(s.plus, newPath))
    throw refuse("names different paths in its --- and +++ lines");
  if (!s.created && !agree(s.git.a, oldPath)) throw refuse("names different paths in its diff --git line");
  if (!s.deleted && !agree(s.git.b, newPath)) throw refuse("names different paths in its diff --git line");
  const path = newPath ?? oldPath;
  if (path === undefined) throw refuse("names no path");
  if (s.created && newPath === undefined) throw refuse("is new but names no path");
  if (s.deleted && oldPath === undefined) throw refuse("is deleted but names no path");
  const mode = s.deleted ? undefined : (s.newMode ?? s.indexMode);
  let symlink: string | undefined;
  if (mode === SYMLINK && (s.hunks || s.binary)) {
    if (s.binary || s.plusLines.length !== 1) throw refuse("gives a symlink a target that is not one line of text");
    symlink = s.plusLines[0];
  }
  const status: PatchFileStatus = s.created
    ? "added"
    : s.deleted
      ? "deleted"
      : rename
        ? "renamed"
        : copy
          ? "copied"
          : "modified";
  const oldMode = s.oldMode ?? (s.created ? undefined : s.indexMode);
  const newMode = s.newMode ?? (s.deleted ? undefined : s.indexMode);
  return {
    path,
    ...(from !== undefined ? { oldPath: from } : {}),
    status,
    binary: s.binary,
    added: s.added,
    deleted: s.removed,
    ...(oldMode !== undefined ? { oldMode } : {}),
    ...(newMode !== undefined ? { newMode } : {}),
    ...(symlink !== undefined ? { symlink } : {}),
  };
}
