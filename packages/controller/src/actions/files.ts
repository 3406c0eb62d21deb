// read and write: guest text files.

import * as v from "valibot";
import { LIMITS } from "@pi-sandbox/config";
import type { TextRead, WriteResult } from "@pi-sandbox/supervisor";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, GUEST_PATH, name, nameArg, positional, text } from "./kit/parts.js";

/** `read`: a guest text file, capped. */
export const read = defineAction({
  name: "read",
  summary: `read a guest text file (at most ${LIMITS.outputMaxBytes / 1024} KiB, truncation marked)`,
  args: [nameArg, arg("path", "string", true, "absolute guest path", GUEST_PATH)],
  route: "daemon",
  schema: actionSchema("read", { name, path: text }),
  cli: {
    usage: "read <name> <guest-path>   print a guest text file",
    toAction: (input) => ({
      action: "read",
      name: positional(input, 0, "a name", "read"),
      path: positional(input, 1, "a guest path", "read"),
    }),
  },
  run: async (args, ctx): Promise<TextRead & { path: string }> => ({
    path: args.path,
    ...(await ctx.guest.supervisor().readText(args.path)),
  }),
  formatText: (result) => result.content + (result.truncated ? "\n[truncated]\n" : ""),
  brief: (result) => result.path,
});

/** `write`: a guest text file, atomically. */
export const write = defineAction({
  name: "write",
  summary: `write a guest text file (at most ${LIMITS.writeMaxBytes / 1024 / 1024} MiB; the parent directory must exist)`,
  args: [
    nameArg,
    arg("path", "string", true, "absolute guest path", GUEST_PATH),
    arg("content", "string", true, "file text", "none"),
  ],
  route: "daemon",
  schema: actionSchema("write", { name, path: text, content: v.string() }),
  cli: {
    usage: "write <name> <guest-path>   write stdin to a guest text file",
    toAction: async (input) => ({
      action: "write",
      name: positional(input, 0, "a name", "write"),
      path: positional(input, 1, "a guest path", "write"),
      content: await input.stdin(),
    }),
  },
  run: (args, ctx): Promise<WriteResult> => ctx.guest.supervisor().writeFile(args.path, args.content),
  brief: (result) => result.path,
});
