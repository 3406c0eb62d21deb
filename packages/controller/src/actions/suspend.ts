// The suspend action: a stop that keeps the guest's memory, so the next start resumes it. Its
// work happens in the instance's daemon (daemon/suspend.ts), queued with the other lifecycle work.

import { defineAction } from "./kit/define.js";
import { actionSchema, name, nameArg, positional } from "./kit/parts.js";
import { formatView } from "./kit/text.js";

/** `suspend`: cut clients, save memory with a checkpoint. */
export const suspend = defineAction({
  name: "suspend",
  summary:
    "cut preview and terminal clients, save the guest's memory with a disk checkpoint; the next start resumes it with its processes and services (or boots cold and says why)",
  args: [nameArg],
  route: "daemon",
  lifecycle: "queued",
  long: true,
  schema: actionSchema("suspend", { name }),
  cli: {
    eachName: true,
    usage: "suspend <name>…   save instances' memory to disk and stop them",
    toAction: (input) => ({ action: "suspend", name: positional(input, 0, "a name", "suspend") }),
  },
  run: (_args, ctx) => ctx.lifecycle.suspend(),
  formatText: formatView,
});
