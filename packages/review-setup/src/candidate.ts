// The review candidate in the guest: the snapshot archive copied (sha256-checked), unpacked into a
// new candidate directory, installed and built there, then made `current` in one rename; the
// previous candidate is kept (a running Pi may use it), older ones go. A failing step leaves the
// current candidate as it was.

import { shellQuote } from "@pi-sandbox/config";
import { ReviewSetupError } from "./errors.js";
import type { GuestSession } from "./guest.js";
import type { ReviewLayout } from "./layout.js";
import type { StepEvent, StepName } from "./steps.js";
import type { Snapshot } from "./snapshot.js";

const STEP_DEADLINE_MS = 30 * 60_000;

/** A candidate id: the time (UTC, to the second) and the archive's sha256 prefix. */
export function candidateIdAt(ms: number, sha256: string): string {
  const stamp = new Date(ms).toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  return `${stamp}-${sha256.slice(0, 8)}`;
}

/** Where and for whom the candidate steps run. */
export interface CandidateContext {
  guest: GuestSession;
  layout: ReviewLayout;
  /** Instance name, for hints. */
  name: string;
  emit: (step: StepName, status: StepEvent["status"], message: string) => void;
  signal: AbortSignal | undefined;
}

/** Runs transfer, verify, unpack, install, build and switch for candidate `id`. */
export async function installCandidate(
  context: CandidateContext,
  snapshot: Snapshot,
  commands: { install: string; build: string },
  id: string,
): Promise<{ id: string; candidate: string; previousId: string | undefined }> {
  const { guest, layout, name, emit, signal } = context;
  const incoming = layout.incoming(id);
  const candidate = layout.candidate(id);
  const logDir = layout.log(id, "x").replace(/\/x\.log$/, "");

  emit("transfer", "start", `copying the archive to ${incoming}`);
  await mustSucceed(
    guest,
    "transfer",
    `mkdir -p ${shellQuote(incoming)} ${shellQuote(logDir)} ${shellQuote(layout.candidates)}`,
    signal,
  );
  const archive = `${incoming}/snapshot.tar.gz`;
  // The controller's upload: chunked, and renamed into place only once the guest found the
  // sha256 of what arrived equal to the host file's.
  const sent = await guest.upload(snapshot.archivePath, archive, { signal });
  emit("transfer", "done", `${sent.bytes} bytes`);

  emit("verify", "start", "comparing the sha256 the guest verified with the snapshot's");
  const guestSum = sent.sha256;
  if (guestSum !== snapshot.sha256) {
    await guest.exec(`rm -rf ${shellQuote(incoming)}`, { signal }).catch(() => undefined);
    throw new ReviewSetupError(
      "REVIEW_SETUP_CHECKSUM_MISMATCH",
      `the archive in the guest has sha256 ${guestSum || "(none)"}, the snapshot has ${snapshot.sha256}`,
      {
        hint: "Nothing was unpacked and the current candidate is unchanged; rerun the command.",
        details: { expected: snapshot.sha256, actual: guestSum },
      },
    );
  }
  emit("verify", "done", `sha256 ${guestSum} matches`);

  const previousId = await currentCandidate(guest, layout, signal);
  const cleanup = `rm -rf ${shellQuote(candidate)} ${shellQuote(incoming)}`;
  const steps: [StepName, string, string][] = [
    ["unpack", `mkdir -p ${shellQuote(candidate)} && tar -xzf ${shellQuote(archive)} -C ${shellQuote(candidate)}`, "/"],
    ["install", commands.install, candidate],
    ["build", commands.build, candidate],
  ];
  for (const [step, command, cwd] of steps) {
    const log = layout.log(id, step);
    emit(step, "start", `${command} (log: ${log})`);
    const result = await guest.exec(
      `cd ${shellQuote(cwd)} && { ${command} ; } > ${shellQuote(log)} 2>&1; rc=$?; tail -n 20 ${shellQuote(log)}; exit $rc`,
      { signal, deadlineMs: STEP_DEADLINE_MS },
    );
    if (result.exitCode !== 0) {
      await guest.exec(cleanup, { signal }).catch(() => undefined);
      throw new ReviewSetupError(
        "REVIEW_SETUP_STEP_FAILED",
        `${step} failed (exit ${result.exitCode}); log: ${log}; ` +
          (previousId ? `candidate ${previousId} stays current` : "no candidate is current yet"),
        {
          hint: `Read the log with: npx pi-sandbox exec ${name} -- cat ${log}`,
          details: { step, logPath: log, exitCode: result.exitCode, tail: result.output, previousId },
        },
      );
    }
    emit(step, "done", `${step} ok`);
  }

  emit("switch", "start", `selecting ${id}`);
  const tmpLink = `${layout.root}/.current-${id}`;
  await mustSucceed(
    guest,
    "switch",
    // rename(2) of a fresh symlink over the old one: readers see either candidate, never none.
    `ln -sfn candidates/${id} ${shellQuote(tmpLink)} && mv -T ${shellQuote(tmpLink)} ${shellQuote(layout.current)}`,
    signal,
  );
  // Keep the new and the previous candidate (a running Pi may still use it); drop older ones.
  const keep = [id, previousId].filter((x): x is string => Boolean(x));
  await guest
    .exec(
      `cd ${shellQuote(layout.candidates)} && for d in *; do case " ${keep.join(" ")} " in *" $d "*) ;; *) rm -rf -- "$d";; esac; done; ` +
        `cd ${shellQuote(layout.root)}/incoming && for d in *; do [ "$d" = ${shellQuote(id)} ] || rm -rf -- "$d"; done; true`,
      { signal },
    )
    .catch(() => undefined);
  emit("switch", "done", `${layout.current} -> ${candidate}` + (previousId ? ` (was ${previousId})` : ""));
  return { id, candidate, previousId };
}

/** The id of the current candidate, or undefined before the first. */
async function currentCandidate(guest: GuestSession, layout: ReviewLayout, signal?: AbortSignal) {
  const link = await guest.exec(`readlink ${shellQuote(layout.current)} || true`, { signal });
  const target = link.output.trim();
  return target ? target.split("/").pop() : undefined;
}

/** Runs `cmd` in the guest; a failure is REVIEW_SETUP_STEP_FAILED for `step`, the current candidate unchanged. */
export async function mustSucceed(guest: GuestSession, step: StepName, cmd: string, signal?: AbortSignal) {
  const result = await guest.exec(cmd, { signal });
  if (result.exitCode !== 0) {
    throw new ReviewSetupError(
      "REVIEW_SETUP_STEP_FAILED",
      `${step} failed (exit ${result.exitCode}): ${result.output.trim().slice(-2000)}`,
      {
        hint: "The current candidate is unchanged. Fix the cause shown above and rerun.",
        details: { step, exitCode: result.exitCode, output: result.output },
      },
    );
  }
  return result;
}
