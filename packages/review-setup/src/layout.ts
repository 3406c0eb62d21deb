// Guest paths of the review directory, named in one place.
import { posix } from "node:path";

/** Guest paths of the review directory; the one place that names them. */
export interface ReviewLayout {
  /** `<workspace>/.review`. */
  root: string;
  /** Symlink to the selected candidate; switched atomically. */
  current: string;
  /** Directory of all candidates. */
  candidates: string;
  /** Isolated, private (0700) Pi agent directory shared by all candidates. */
  agentDir: string;
  /** Candidate directory of refresh `id`. */
  candidate(id: string): string;
  /** Transfer parts and the reassembled archive of refresh `id`. */
  incoming(id: string): string;
  /** Log of `step` in refresh `id`. */
  log(id: string, step: string): string;
}

/** The review layout under a guest workspace. */
export function reviewLayout(workspace: string): ReviewLayout {
  const root = posix.join(workspace, ".review");
  return {
    root,
    current: posix.join(root, "current"),
    candidates: posix.join(root, "candidates"),
    agentDir: posix.join(root, "agent"),
    candidate: (id) => posix.join(root, "candidates", id),
    incoming: (id) => posix.join(root, "incoming", id),
    log: (id, step) => posix.join(root, "logs", id, `${step}.log`),
  };
}
