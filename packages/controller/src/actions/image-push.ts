// `image push NAME --context C`: copies an image of this machine's cache to a context's machine,
// which imports it under the same name (remote/route.ts moves the bytes with scp). Without another
// context there is nowhere to push to.

import { ControllerError } from "../errors.js";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, positional, text } from "./kit/parts.js";
import type { ImageSummary } from "@pi-sandbox/image";

/** `image push`. */
export const imagePush = defineAction({
  name: "image-push",
  summary: "copy an image of your cache to a context's machine (--context NAME), which imports it",
  args: [arg("name", "string", true, "image name (or id) in this machine's cache")],
  route: "local",
  userOnly: true,
  schema: actionSchema("image-push", { name: text }),
  cli: {
    usage: "image push NAME                      copy an image to a context's machine (--context NAME)",
    toAction: (input) => ({ action: "image-push", name: positional(input, 0, "an image name", "image push") }),
    notes: ["The other machine checks the files against the image's manifest and keeps it under the same name."],
  },
  // Reached only for the local context: a push to another goes through remote/route.ts.
  run: (args): Promise<ImageSummary> =>
    Promise.reject(
      new ControllerError(
        "CONTROLLER_CONTEXT_REFUSED",
        `image push copies ${args.name} to another machine; none was named`,
        {
          hint: `Name a context: pi-sandbox image push ${args.name} --context NAME (pi-sandbox context ls lists them).`,
        },
      ),
    ),
  formatText: (i) => `pushed image ${i.name} (${i.id}): ${i.dir} there\n`,
});
