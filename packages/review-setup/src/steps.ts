// The steps of a refresh and its progress lines: a leaf both the refresh (refresh.ts) and its
// candidate steps (candidate.ts) name.

/** Steps in the order they run. */
export type StepName =
  | "model-server"
  | "instance"
  | "snapshot"
  | "transfer"
  | "verify"
  | "unpack"
  | "install"
  | "build"
  | "switch"
  | "agent"
  | "local-models"
  | "credentials"
  | "live-check";

/** One progress line. */
export interface StepEvent {
  /** Which step. */
  step: StepName;
  /** `start`, `done`, `skip` or `info` (intermediate news such as boot stages or part counts). */
  status: "start" | "done" | "skip" | "info";
  /** Human text. */
  message: string;
}
