// The `idle` block of sandbox.yaml: how long an instance may sit unused before it suspends itself.
import * as v from "valibot";
import { DURATION_PATTERN, formatDuration, parseDuration } from "./duration.js";
import { LIMITS } from "./limits.js";
import { got } from "./schema-checks.js";

const RANGE = `between ${formatDuration(LIMITS.idleSuspendMinMs)} and ${formatDuration(LIMITS.idleSuspendMaxMs)}`;

/** A `suspendAfter` duration within the limits. */
export const idleDurationSchema = v.pipe(
  v.string(got(`must be a duration such as 15m, 90s or 1h30m, ${RANGE}`)),
  v.regex(DURATION_PATTERN, got(`must be a duration such as 15m, 90s or 1h30m, ${RANGE}`)),
  v.check(
    (text: string) => {
      const ms = parseDuration(text) ?? 0;
      return ms >= LIMITS.idleSuspendMinMs && ms <= LIMITS.idleSuspendMaxMs;
    },
    got(`must be ${RANGE}`),
  ),
  v.description(
    "How long the instance may go without a preview request, open WebSocket, action, terminal, running command or guest CPU use before it suspends itself (memory saved, no QEMU left); the next preview request or action resumes it.",
  ),
);

/** `idle: {suspendAfter}`. */
export const idleSchema = v.pipe(
  v.strictObject({ suspendAfter: idleDurationSchema }),
  v.description("Suspend the instance while nobody uses it; omit to keep it running (the default)."),
);
