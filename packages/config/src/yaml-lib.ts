// The yaml library, loaded on first use: every package imports this one's index (names, limits,
// errors), and most of them never read or write YAML. A pi-sandbox command or daemon that parses
// no sandbox.yaml skips its ~70 modules. Loaded with require: the same file an import loads
// (yaml's "node" export), synchronously, so parseConfig and renderConfig stay synchronous.
import { createRequire } from "node:module";

type YamlLib = typeof import("yaml");

let loaded: YamlLib | undefined;

/** The yaml library (loaded on the first call). */
export function yamlLib(): YamlLib {
  loaded ??= createRequire(import.meta.url)("yaml") as YamlLib;
  return loaded;
}
