// Shared helpers of the config tests: the ConfigError of a text that must fail, its single issue or
// the one at a path, and a config around one service's lines.
import { ConfigError, isConfigError, parseConfig, type ConfigIssue } from "../../src/index.js";

/** Parses text that must fail and returns the ConfigError. */
export function rejection(text: string, sourcePath?: string): ConfigError {
  try {
    parseConfig(text, sourcePath === undefined ? {} : { sourcePath });
  } catch (error) {
    if (isConfigError(error)) return error;
    throw error;
  }
  throw new Error(`expected a ConfigError for:\n${text}`);
}

/** The single issue of a config that must fail with exactly one problem. */
export function onlyIssue(text: string): ConfigIssue {
  const error = rejection(text);
  expect(error.issues).toHaveLength(1);
  return error.issues[0]!;
}

/** The issue at `path`; fails the test when there is none. */
export function issueAt(error: ConfigError, path: string): ConfigIssue {
  const found = error.issues.find((issue) => issue.path === path);
  if (!found) throw new Error(`no issue at ${path}; got:\n${error.message}`);
  return found;
}

/** A config with one service `web` whose body is the given YAML lines (indented by the helper). */
export function withService(lines: string, name = "web"): string {
  const body = lines
    .trim()
    .split("\n")
    .map((line) => `    ${line}`)
    .join("\n");
  return `version: 1\nservices:\n  ${name}:\n    command: run\n${body}\n`;
}

export { ConfigError };
