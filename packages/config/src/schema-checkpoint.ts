// The `checkpoint` block of sandbox.yaml: how much guest activity may pass between automatic
// checkpoints of a running instance's disk (what a crash can take at most), or `off`; and how many
// kept checkpoints (`pi-sandbox checkpoint`, Pi's turns) an instance holds before the oldest
// unpinned ones go.
import * as v from "valibot";
import { DURATION_PATTERN, formatDuration, parseDuration } from "./duration.js";
import { LIMITS } from "./limits.js";
import { CONFIG_DEFAULTS } from "./types.js";
import { got } from "./schema-checks.js";
import { reachesNothing } from "./host-reach.js";

const RANGE = `between ${formatDuration(LIMITS.checkpointEveryMinMs)} and ${formatDuration(LIMITS.checkpointEveryMaxMs)}`;
const SHAPE = `must be a duration such as 5m, 90s or 1h30m, ${RANGE}, or off`;

/** A `checkpoint.every` value: `off`, or a duration within the limits. */
export const checkpointEverySchema = v.pipe(
  v.union(
    [
      v.literal("off"),
      v.pipe(
        v.string(got(SHAPE)),
        v.regex(DURATION_PATTERN, got(SHAPE)),
        v.check(
          (text: string) => {
            const ms = parseDuration(text) ?? 0;
            return ms >= LIMITS.checkpointEveryMinMs && ms <= LIMITS.checkpointEveryMaxMs;
          },
          got(`must be ${RANGE}, or off`),
        ),
      ),
    ],
    got(SHAPE),
  ),
  v.description(
    "How much guest activity (actions, previews, terminals, guest CPU use, disk writes) may pass between automatic checkpoints of the disk while the instance runs, e.g. 5m (the default): a crash or power cut then loses at most that much of the guest's writes, even when the run's own data cannot be recovered. off: checkpoints only at stop and suspend.",
  ),
);

/** A whole number within `[min, max]`. */
function wholeBetween(min: number, max: number, what: string) {
  const shape = `must be a whole number of ${what} between ${min} and ${max}`;
  return v.pipe(v.number(got(shape)), v.integer(got(shape)), v.minValue(min, got(shape)), v.maxValue(max, got(shape)));
}

/** `checkpoint: {every, keep, keepGiB}`. */
export const checkpointSchema = v.pipe(
  v.strictObject({
    every: v.optional(checkpointEverySchema),
    keep: v.optional(
      v.pipe(
        wholeBetween(1, LIMITS.checkpointKeepMax, "checkpoints"),
        v.description(
          `Most kept checkpoints (pi-sandbox checkpoint, Pi's turns) an instance holds; beyond it the oldest unpinned ones are removed. Default ${CONFIG_DEFAULTS.checkpointKeep}.`,
        ),
      ),
    ),
    keepGiB: v.optional(
      v.pipe(
        wholeBetween(1, LIMITS.checkpointKeepGiBMax, "GiB"),
        reachesNothing("a size limit on the controller's own checkpoint files; it names nothing on the host"),
        v.description(
          `Most host GiB the kept checkpoints of an instance hold beyond its own disk; beyond it the oldest unpinned ones are removed. Default ${CONFIG_DEFAULTS.checkpointKeepGiB}.`,
        ),
      ),
    ),
  }),
  v.description(
    "Automatic disk checkpoints while the instance runs (omit for every 5m of activity), and how many kept checkpoints it holds.",
  ),
);
