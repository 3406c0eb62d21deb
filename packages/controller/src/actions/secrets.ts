// The secrets action: a running instance reads its `network.secrets` sources again, so a rotated
// token is used without a restart. The values stay in the daemon.
import { defineAction } from "./kit/define.js";
import { actionSchema, name, nameArg, positional } from "./kit/parts.js";
import { oneLine } from "./kit/text.js";

/**
 * `secrets`: reads every `network.secrets` source of a running instance again, so a rotated
 * token is used from the next request on without a restart. Values never leave the daemon.
 */
export const secrets = defineAction({
  name: "secrets",
  summary: "read the network.secrets sources of a running instance again (a rotated token, no restart)",
  args: [nameArg],
  route: "daemon",
  schema: actionSchema("secrets", { name }),
  cli: {
    usage: "secrets <name>                       read an instance's secrets again (values stay on the host)",
    toAction: (input) => ({ action: "secrets", name: positional(input, 0, "a name", "secrets") }),
    notes: [
      "Each value is read again from its file, or from the environment the instance was started",
      "with (an env: source changes only with a new start). The guest's placeholders stay the same.",
    ],
  },
  run: (_args, ctx) => ctx.guest.reloadSecrets(),
  formatText: (result) =>
    result.secrets.length === 0
      ? "no secrets\n"
      : result.secrets.map((s) => `${oneLine(s.name)} → ${s.hosts.map(oneLine).join(", ")}: read again\n`).join(""),
  brief: (result) => `${result.secrets.length} secret(s) read again`,
});
