// The help action: the actions, their arguments, the YAML keys, profiles and limits, rendered by
// kit/help.ts from the action table. Runs locally, no daemon needed.
import { defineAction } from "./kit/define.js";
import { renderActionHelp } from "./kit/help.js";
import { actionSchema } from "./kit/parts.js";

/** `help`: actions, arguments, YAML keys, profiles and limits. */
export const helpAction = defineAction({
  name: "help",
  summary: "this text: actions, arguments, YAML keys, profiles and limits",
  args: [],
  route: "local",
  schema: actionSchema("help", {}),
  cli: {
    usage: "help [actions | <command>]   this overview; help actions: every action, YAML keys, limits",
    toAction: () => ({ action: "help" }),
  },
  run: async (_args, ctx) => ({ help: renderActionHelp(ctx.actions) }),
  formatText: (result) => `${result.help}\n`,
});
