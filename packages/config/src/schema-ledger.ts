// The `ledger` block of sandbox.yaml: how long the ledger of a destroyed instance (the record of
// what was done to it, kept by its controller on the host) is kept after the destroy.
import * as v from "valibot";
import { LIMITS } from "./limits.js";
import { got } from "./schema-checks.js";
import { reachesNothing } from "./host-reach.js";

const SHAPE = `must be forever, off, or a whole number of days between 1 and ${LIMITS.ledgerKeepDaysMax}`;

/** `ledger.keepDestroyed`: `forever`, `off`, or days. */
export const keepDestroyedSchema = v.pipe(
  v.union(
    [
      v.literal("forever"),
      v.literal("off"),
      v.pipe(
        v.number(got(SHAPE)),
        v.integer(got(SHAPE)),
        v.minValue(1, got(SHAPE)),
        v.maxValue(LIMITS.ledgerKeepDaysMax, got(SHAPE)),
      ),
    ],
    got(SHAPE),
  ),
  reachesNothing("how long the controller keeps its own record of a destroyed instance; it names nothing on the host"),
  v.description(
    "How long the ledger of a destroyed instance is kept on the host (under the state root's ledgers/): forever (the default, until you delete it), a number of days (removed at a destroy after that), or off (removed with the instance).",
  ),
);

/** `ledger: {keepDestroyed}`. */
export const ledgerSchema = v.pipe(
  v.strictObject({ keepDestroyed: v.optional(keepDestroyedSchema) }),
  v.description("The instance's ledger (what was done to it); omit to keep it forever after a destroy."),
);
