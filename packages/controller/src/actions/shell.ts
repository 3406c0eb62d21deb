// The shell action (CLI `shell` or `ssh`): a temporary ssh command into the guest, run on a terminal
// or printed. For the user only: a model never gets a terminal.
import * as v from "valibot";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, name, nameArg, positional } from "./kit/parts.js";

/** `shell` (CLI `shell` or `ssh`): a temporary ssh command into the guest; for the user only. */
export const shell = defineAction({
  name: "shell",
  summary: "user-only: a temporary ssh command into the guest (use /sandbox <name> in Pi)",
  args: [nameArg, arg("user", "string", false, "guest user, default root")],
  route: "daemon",
  userOnly: true,
  schema: actionSchema("shell", { name, user: v.optional(v.pipe(v.string(), v.regex(/^[a-z_][a-z0-9_-]{0,31}$/))) }),
  cli: {
    usage: "shell <name> [user] [--print]   a terminal in the guest over ssh",
    aliases: ["ssh"],
    options: { print: { type: "boolean", description: "print the ssh command instead of running it" } },
    toAction: (input) => ({
      action: "shell",
      name: positional(input, 0, "a name", "shell"),
      user: input.positionals[1],
    }),
    run: (input) => (input.values.print ? undefined : { kind: "session" }),
    notes: [
      "On a terminal, runs ssh into the guest and exits with its exit code. With --print, --json or",
      "when stdout is not a terminal, prints the ssh command instead. Every call makes a new key and",
      "forwarder; they close after 10 minutes with no session open. The command reads no ssh config",
      "(-F none), so ~/.ssh/config cannot forward X11 or the agent into the guest.",
    ],
  },
  run: (args, ctx) => ctx.guest.shell(args.user ?? "root"),
  formatText: (result) => `${result.command}\n`,
  brief: (result) => result.command,
});
