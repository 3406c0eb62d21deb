import * as v from "valibot";
import { defineAction } from "./define.js";
import { actionSchema, arg, name, nameArg, positional } from "./parts.js";

/** `shell` (CLI `shell` or `ssh`): a temporary ssh command into the guest; for the user only. */
export const shell = defineAction({
  name: "shell",
  summary: "user-only: a temporary ssh command into the guest (use /sandbox <name> in Pi)",
  args: [nameArg, arg("user", "string", false, "guest user, default root")],
  route: "daemon",
  userOnly: true,
  schema: actionSchema("shell", { name, user: v.optional(v.pipe(v.string(), v.regex(/^[a-z_][a-z0-9_-]{0,31}$/))) }),
  cli: {
    usage: "shell <name> [user]                  print a temporary ssh command (alias: ssh)",
    aliases: ["ssh"],
    toAction: (input) => ({
      action: "shell",
      name: positional(input, 0, "a name", "shell"),
      user: input.positionals[1],
    }),
  },
  run: (args, ctx) => ctx.guest.shell(args.user ?? "root"),
  formatText: (result) => `${result.command}\n`,
  brief: (result) => result.command,
});
