// The doctor action: checks of the host (Node, QEMU, qemu-img, the accelerator, the state
// directory's permissions) and of a sandbox.yaml's image, run locally; each failed check says its fix.
import * as v from "valibot";
import { defineAction } from "./kit/define.js";
import { lazyHandler } from "./kit/lazy.js";
import { actionSchema, arg, text } from "./kit/parts.js";

/** `doctor`: host and image checks, each with its fix. */
export const doctor = defineAction({
  name: "doctor",
  summary: "check Node, QEMU, qemu-img, accelerator, state-dir permissions and (with config) the image",
  args: [arg("config", "string", false, "sandbox.yaml whose image to check", { kind: "host-file-read" })],
  route: "local",
  schema: actionSchema("doctor", { config: v.optional(text) }),
  cli: {
    usage: "doctor [-c sandbox.yaml]             check the host (and an image)",
    options: {
      config: {
        type: "string",
        short: "c",
        value: "file",
        description: "also check the image this sandbox.yaml names",
      },
    },
    toAction: (input) => ({ action: "doctor", config: input.values.config }),
  },
  // The checks load the image package and the VM host probes: only when the doctor runs, not with
  // the action table every CLI command and daemon loads.
  run: lazyHandler(async () => (await import("./doctor-checks.js")).doctorHandler),
  formatText: (result) =>
    result.checks
      .map(
        (c) =>
          `${c.status.padEnd(4)}  ${c.name}: ${c.detail}${c.fix && c.status !== "ok" ? `\n      fix: ${c.fix}` : ""}`,
      )
      .join("\n") + "\n",
  brief(result) {
    const failed = result.checks.filter((c) => c.status === "fail").length;
    return failed === 0 ? "all checks passed" : `${failed} check${failed === 1 ? "" : "s"} failed`;
  },
});
