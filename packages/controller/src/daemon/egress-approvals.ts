// The daemon's side of egress approvals: a guest request to a host off allowedHosts is let through
// when the user granted the host for this instance, else held while someone who can answer (a Pi
// session with a UI, an open dashboard) is asked, at most EGRESS_HOLD_MS, and refused at once
// when nobody can. Answers come from the user through the egress actions, never from the model (a
// model's call is refused before it gets here) or the guest (which reaches no socket of ours).
import { HOST_PATTERN } from "@pi-sandbox/config";
import { isHostAllowed, type EgressRequest, type EgressVerdict } from "@pi-sandbox/vm";
import type { EgressAnswer, EgressAnswered } from "../actions/kit/context.js";
import { ControllerError } from "../errors.js";
import {
  answerersNow,
  readGrants,
  updateGrants,
  writeAsks,
  type EgressAnswerer,
  type EgressAsk,
} from "../state/egress.js";
import type { StateLayout } from "../state/layout.js";
import type { LedgerKind } from "../state/ledger.js";
import type { Caller } from "../wire.js";

/** Longest a request is held for an answer, in ms. */
export const EGRESS_HOLD_MS = 60_000;
/** Most hosts held at once; a request to yet another host is refused (the guest cannot flood the user). */
export const EGRESS_HELD_HOSTS_MAX = 8;
/** How long a host the user denied is refused without asking again (a client's retries), in ms. */
export const EGRESS_DENIED_QUIET_MS = 60_000;

/** What the approvals need of the daemon. */
export interface EgressApprovalsDeps {
  layout: StateLayout;
  name: string;
  /** Appends to the instance's ledger. */
  record(kind: LedgerKind, data: Record<string, unknown>): void;
  /** Test seam: the clock, in ms (default `Date.now`). */
  now?: () => number;
  /** Test seam: the hold, in ms (default {@link EGRESS_HOLD_MS}). */
  holdMs?: number;
}

interface Held {
  ask: EgressAsk;
  couldAnswer: EgressAnswerer[];
  settle: ((verdict: EgressVerdict) => void)[];
  timer: NodeJS.Timeout;
}

/** The hosts held for an answer, and the answers. */
export class EgressApprovals {
  readonly #held = new Map<string, Held>();
  readonly #denied = new Map<string, number>();
  #writing: Promise<void> = Promise.resolve();

  constructor(private readonly deps: EgressApprovalsDeps) {}

  #now(): number {
    return (this.deps.now ?? Date.now)();
  }

  /** Decides one request to a host off allowedHosts (the VM's approver). */
  async decide(request: EgressRequest): Promise<EgressVerdict> {
    const { host } = request;
    // Only what a user could type into allowedHosts is shown to them: anything else from the guest is refused unasked.
    if (!HOST_PATTERN.test(host) || host.startsWith("*")) return { allowed: false, rule: "not in allowedHosts" };
    const grants = await readGrants(this.deps.layout, this.deps.name).catch(() => []);
    if (grants.some((grant) => isHostAllowed(host, [grant.host]))) {
      return { allowed: true, rule: "approved for this instance" };
    }
    const couldAnswer = await answerersNow(this.deps.layout, this.deps.name, this.#now()).catch(() => []);
    // From here on nothing is awaited: a request to a host already held joins it, never replaces it.
    if ((this.#denied.get(host) ?? 0) > this.#now()) return { allowed: false, rule: "denied by the user" };
    const held = this.#held.get(host);
    if (held) {
      held.ask.waiting += 1;
      this.#publish();
      return new Promise((resolve) => held.settle.push(resolve));
    }
    if (couldAnswer.length === 0) return { allowed: false, rule: "nobody to ask" };
    if (this.#held.size >= EGRESS_HELD_HOSTS_MAX) return { allowed: false, rule: "too many waiting" };
    return this.#hold(request, couldAnswer);
  }

  #hold(request: EgressRequest, couldAnswer: EgressAnswerer[]): Promise<EgressVerdict> {
    const now = this.#now();
    const holdMs = this.deps.holdMs ?? EGRESS_HOLD_MS;
    const ask: EgressAsk = {
      ...request,
      since: new Date(now).toISOString(),
      until: new Date(now + holdMs).toISOString(),
      waiting: 1,
    };
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#settle(request.host, { allowed: false, rule: "no answer in time" }, { answer: "none", by: "nobody" });
      }, holdMs);
      // A held request never keeps the daemon alive on its own.
      timer.unref();
      this.#held.set(request.host, { ask, couldAnswer, settle: [resolve], timer });
      this.#publish();
    });
  }

  /** Lets the held requests of `host` go with `verdict`, and records what was asked and answered. */
  #settle(host: string, verdict: EgressVerdict, answer: { answer: string; by: string }): void {
    const held = this.#held.get(host);
    if (!held) return;
    clearTimeout(held.timer);
    this.#held.delete(host);
    const { ask } = held;
    this.deps.record("trust", {
      asked: [`let ${this.deps.name} reach ${ask.host}:${ask.port} (${ask.protocol} ${ask.method})?`],
      answer: answer.answer,
      by: answer.by,
      couldAnswer: held.couldAnswer,
      requests: ask.waiting,
    });
    for (const settle of held.settle) settle(verdict);
    this.#publish();
  }

  /**
   * The user's answer about `host` (a name or `*.` pattern): `once` and `deny` settle the requests
   * held for the hosts it matches (CONTROLLER_EGRESS_NOT_WAITING when none is); `instance` settles
   * them too and keeps the grant in the instance's host state, held requests or not.
   */
  async answer(host: string, answer: EgressAnswer, by: Caller): Promise<EgressAnswered> {
    const pattern = host.toLowerCase();
    const matching = [...this.#held.keys()].filter((held) => isHostAllowed(held, [pattern]));
    if (answer === "instance") {
      await updateGrants(this.deps.layout, this.deps.name, (grants) =>
        grants.some((g) => g.host === pattern)
          ? grants
          : [...grants, { host: pattern, at: new Date(this.#now()).toISOString(), by }],
      );
    } else if (matching.length === 0) {
      throw new ControllerError(
        "CONTROLLER_EGRESS_NOT_WAITING",
        `no request of ${this.deps.name} to ${host} is waiting`,
        {
          hint: `pi-sandbox egress ${this.deps.name} lists what waits; without --once, egress approve allows a host for this instance ahead of time.`,
          details: { name: this.deps.name, host },
        },
      );
    }
    const verdict: EgressVerdict =
      answer === "instance"
        ? { allowed: true, rule: "approved for this instance" }
        : answer === "once"
          ? { allowed: true, rule: "approved once" }
          : { allowed: false, rule: "denied by the user" };
    const answered = matching.map((held) => ({ host: held, requests: this.#held.get(held)!.ask.waiting }));
    for (const held of matching) {
      if (answer === "deny") this.#denied.set(held, this.#now() + EGRESS_DENIED_QUIET_MS);
      this.#settle(held, verdict, { answer: verdict.rule, by });
    }
    if (answer === "instance" && matching.length === 0) {
      this.deps.record("trust", {
        asked: [`let ${this.deps.name} reach ${pattern} from now on?`],
        answer: verdict.rule,
        by,
      });
    }
    // Whoever answered reads the asks next: they are written without the settled ones first.
    await this.#writing;
    return {
      name: this.deps.name,
      host: pattern,
      answer,
      answered,
      ...(answer === "instance" ? { granted: true } : {}),
    };
  }

  /** Refuses everything held (the VM stopped: the requests went with it). */
  close(): void {
    for (const host of [...this.#held.keys()]) {
      this.#settle(host, { allowed: false, rule: "no answer in time" }, { answer: "none", by: "nobody" });
    }
  }

  /** The asks as they are now, for Pi, the dashboard and the CLI to read (writes one after another). */
  #publish(): void {
    const asks = [...this.#held.values()].map((held) => ({ ...held.ask }));
    this.#writing = this.#writing.then(() => writeAsks(this.deps.layout, this.deps.name, asks)).catch(() => undefined);
  }
}
