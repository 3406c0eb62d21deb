// `egress-watch`: another machine's dashboard or Pi session, through a context, says it can answer
// these instances' egress asks now (as this machine's own do while a page is open or a session
// uses them: their guests' requests for a new host then wait for an answer instead of failing at
// once) and gets what waits. Its answers come back as egress-approve and egress-deny through the
// context. For the user only: a model claiming an answerer would make the guests' requests wait
// for nobody.

import * as v from "valibot";
import { INSTANCE_NAME_PATTERN } from "@pi-sandbox/config";
import { ControllerError } from "../errors.js";
import { EGRESS_ANSWERERS, markAnswerer, readAsks, type EgressAsk } from "../state/egress.js";
import { defineAction } from "./kit/define.js";
import { actionSchema, arg, name } from "./kit/parts.js";
import { oneLine } from "./kit/text.js";

/** The most instances one call watches. */
const WATCH_MAX = 100;

/** `egress-watch`: mark a dashboard or Pi of another machine as an answerer; what waits, per instance. */
export const egressWatch = defineAction({
  name: "egress-watch",
  summary:
    "another machine's dashboard or Pi session, through a context, says it can answer these running instances' egress asks for the next 15 s; returns the requests waiting for an answer",
  args: [
    arg("names", "string[]", true, `running instances (1-${WATCH_MAX})`),
    arg("id", "string", true, "the dashboard's or session's id (letters, digits and -, up to 64)"),
    arg("by", '"dashboard"|"pi"', false, "who watches, default dashboard"),
  ],
  route: "local",
  userOnly: true,
  schema: actionSchema("egress-watch", {
    names: v.pipe(v.array(name), v.minLength(1), v.maxLength(WATCH_MAX)),
    id: v.pipe(v.string(), v.regex(/^[A-Za-z0-9-]{1,64}$/)),
    by: v.optional(v.picklist(EGRESS_ANSWERERS)),
  }),
  refine(args) {
    const bad = args.names.find((n) => !INSTANCE_NAME_PATTERN.test(n));
    if (bad !== undefined) {
      throw new ControllerError("CONTROLLER_INVALID_NAME", `${JSON.stringify(bad)} is not an instance name`, {
        details: { name: bad },
      });
    }
  },
  run: async (args, ctx): Promise<{ waiting: Record<string, EgressAsk[]> }> => {
    const waiting: Record<string, EgressAsk[]> = {};
    await Promise.all(
      args.names.map(async (instance) => {
        await markAnswerer(ctx.layout, instance, args.by ?? "dashboard", args.id);
        const asks = await readAsks(ctx.layout, instance).catch(() => [] as EgressAsk[]);
        if (asks.length > 0) waiting[instance] = asks;
      }),
    );
    return { waiting };
  },
  formatText: (result) =>
    Object.entries(result.waiting)
      .flatMap(([instance, asks]) => asks.map((ask) => `${instance} waits for ${oneLine(`${ask.host}:${ask.port}`)}\n`))
      .join(""),
});
