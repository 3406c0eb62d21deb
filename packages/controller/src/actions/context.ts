// context add, ls, use and rm: the machines actions can run on (state/contexts.ts). They always
// run here, whatever context a command names; changing them is the user's, never the model's.

import * as v from "valibot";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, positional, text } from "./kit/parts.js";
import { oneLine, table } from "./kit/text.js";
import { addContext, listContexts, removeContext, useContext, type ContextEntry } from "../state/contexts.js";

const nameDoc = arg("context", "string", true, "context name (letters, digits, '.', '_', '-')");

/** `context add NAME ssh://[user@]host[:port]`. */
export const contextAdd = defineAction({
  name: "context-add",
  summary: "add a context: another machine with pi-sandbox, reached over ssh",
  args: [
    nameDoc,
    arg(
      "url",
      "string",
      true,
      "ssh://[user@]host[:port]; your ssh config (keys, Host aliases) applies",
      // Another machine, reached by ssh when a command uses the context: no path, port or credential here.
      "none",
    ),
  ],
  route: "local",
  userOnly: true,
  schema: actionSchema("context-add", { context: text, url: text }),
  cli: {
    usage: "context add NAME URL                add another machine, URL ssh://[user@]host[:port]",
    toAction: (input) => ({
      action: "context-add",
      context: positional(input, 0, "a context name", "context add"),
      url: positional(input, 1, "an ssh URL (ssh://[user@]host[:port])", "context add"),
    }),
    notes: [
      "The other machine needs the same pi-sandbox version on the PATH of a non-interactive ssh",
      "login. Nothing is sent until a command uses the context.",
    ],
  },
  run: (args, ctx): Promise<ContextEntry> => addContext(args.context, args.url, ctx.env),
  formatText: (c) =>
    `added context ${oneLine(c.name)} (${oneLine(c.url)}); use it with pi-sandbox context use ${oneLine(c.name)}\n`,
});

/** `context ls`. */
export const contextList = defineAction({
  name: "context-ls",
  summary: "the contexts, and which one commands use",
  args: [],
  route: "local",
  schema: actionSchema("context-ls", {}),
  cli: {
    usage: "context ls                           contexts; * marks the one in use",
    aliases: ["contexts"],
    toAction: () => ({ action: "context-ls" }),
  },
  run: (_args, ctx) => listContexts(ctx.env),
  formatText: (r) =>
    table([
      ["NAME", "URL"],
      ...r.contexts.map((c) => [
        `${oneLine(c.name)}${c.name === r.current ? " *" : ""}`,
        c.url ? oneLine(c.url) : "(this machine)",
      ]),
    ]),
});

/** `context use NAME`. */
export const contextUse = defineAction({
  name: "context-use",
  summary: "make a context the one commands use (--context and PI_SANDBOX_CONTEXT still pick another)",
  args: [nameDoc],
  route: "local",
  userOnly: true,
  schema: actionSchema("context-use", { context: v.string() }),
  cli: {
    usage: "context use NAME                     commands go there from now on",
    toAction: (input) => ({ action: "context-use", context: positional(input, 0, "a context name", "context use") }),
  },
  run: (args, ctx): Promise<ContextEntry> => useContext(args.context, ctx.env),
  formatText: (c) => `commands use context ${oneLine(c.name)}${c.url ? ` (${oneLine(c.url)})` : ""}\n`,
});

/** `context rm NAME`. */
export const contextRm = defineAction({
  name: "context-rm",
  summary: "forget a context (its machine and instances are left as they are)",
  args: [nameDoc],
  route: "local",
  userOnly: true,
  schema: actionSchema("context-rm", { context: v.string() }),
  cli: {
    usage: "context rm NAME                      forget a context",
    toAction: (input) => ({ action: "context-rm", context: positional(input, 0, "a context name", "context rm") }),
  },
  run: (args, ctx): Promise<ContextEntry> => removeContext(args.context, ctx.env),
  formatText: (c) => `removed context ${oneLine(c.name)}; its machine and instances are untouched\n`,
});
