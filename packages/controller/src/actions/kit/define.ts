// What one action is: its schema, documentation, routing, handler, CLI mapping and formatters,
// all in one module under actions/ (see ARCHITECTURE.md, "Adding an action"). This file holds the
// shapes; actions/kit/registry.ts lists the modules. Handlers reach the daemon and the state files only
// through the context interfaces below, so the client can import every module without loading
// the VM machinery.

import type { HostReachKind } from "@pi-sandbox/config";
import type * as v from "valibot";
import { ControllerError, type ControllerErrorOptions } from "../../errors.js";
import type { EntryView } from "../../state/inspect.js";
import type { EntryKind, StateLayout } from "../../state/layout.js";
import type { HostGuard } from "../../host-guard.js";
import type { Caller, ProgressEvent } from "../../wire.js";
import type { BranchActions, EgressActions, GuestActions, LifecycleActions } from "./context.js";

/** One argument of an action, as documented in help. */
export interface ArgumentDoc {
  /** Argument name as it appears in the JSON action. */
  name: string;
  /** Short type, e.g. `string`, `integer`, `"ensure"|"status"`. */
  type: string;
  /** Whether the action fails without it. */
  required: boolean;
  /** What it means, with defaults and limits. */
  text: string;
  /**
   * How it reaches the host, marked here so every check and prompt follows it (the model guard
   * resolves and confines host paths, the help says so); "none" for an argument that only sounds
   * like it does (a guest path). A test fails for an argument that names a host path, port or
   * credential and has no mark.
   */
  reach?: ArgumentReach;
}

/**
 * An argument's reach: a kind of host reach, `config` for a sandbox.yaml whose own marked keys
 * reach the host too (its trust is asked about), or "none".
 */
export type ArgumentReach = { kind: HostReachKind; config?: true } | "none";

/** The kinds of reach whose argument is a host path (resolved, confined to the project for a model). */
const PATH_REACH: ReadonlySet<HostReachKind> = new Set(["host-file-read", "host-file-write", "mount", "boot-asset"]);

/** The arguments of `spec` that hold host paths (a string or a list), from their marks. */
export function hostPathArgs(spec: Pick<ActionSpec, "args">): ArgumentDoc[] {
  return spec.args.filter((a) => a.reach !== undefined && a.reach !== "none" && PATH_REACH.has(a.reach.kind));
}

/** How an action is executed. */
export type ActionRoute =
  /** Answered from state files in the calling process, no daemon. */
  | "local"
  /** Needs the instance's daemon, which is spawned if not running. */
  | "spawn"
  /** Needs a running daemon; fails with CONTROLLER_NOT_RUNNING otherwise. */
  | "daemon";

/** What a local handler may use. */
export interface LocalContext {
  /** The state layout of the resolved state root. */
  layout: StateLayout;
  /** The caller's working directory (relative config paths were already resolved against it). */
  cwd: string;
  /** The caller's environment. */
  env: NodeJS.ProcessEnv;
  /** Every action, in help's order (the help action renders them; it cannot import the registry that lists it). */
  actions: readonly ActionSpec[];
  /** Streams progress to the caller, when it asked for progress (long local actions: image build). */
  progress?: (event: ProgressEvent) => void;
}

/** What a daemon handler may use: the instance's lifecycle and, while it runs, its guest. */
export interface DaemonContext {
  /** Entry name. */
  name: string;
  /** Entry namespace. */
  kind: EntryKind;
  /** Streams progress to the caller (who may have gone; events are then dropped). */
  progress: (event: ProgressEvent) => void;
  /** Aborted when the caller has gone (its connection closed); only copies heed it. */
  signal?: AbortSignal;
  /** The host-path limits of a model's call (host-guard.ts); absent for the user's own calls. */
  guard?: HostGuard;
  /** The daemon's state root (its protected places are found from it, host-places.ts). */
  stateRoot: string;
  /** Create, prepare, start, stop, destroy: queued, one at a time. */
  lifecycle: LifecycleActions;
  /** Kept checkpoints, rewind and fork: queued with the lifecycle. */
  branches: BranchActions;
  /** Guest actions; each throws CONTROLLER_NOT_RUNNING when no VM runs. */
  guest: GuestActions;
  /** Answers to the guest's held egress requests. */
  egress: EgressActions;
  /** Who makes the call (a model's call carries a guard, whatever its client says). */
  caller: Caller;
}

/** Parsed command-line input of one subcommand. */
export interface CliInput {
  /** Positionals after the subcommand name. */
  positionals: string[];
  /** Values of the options the subcommand declared (a list for options declared `multiple`). */
  values: Record<string, string | boolean | string[] | undefined>;
  /** Reads standard input to the end (for `write`). */
  stdin: () => Promise<string>;
}

/** How the CLI runs a subcommand's action when one call and its printed result are not enough. */
export type CliRun =
  /**
   * exec: follow the returned handle with exec-status calls until the command ends, streaming its
   * output, and exit with its exit code; give up (printing the handle) after `timeoutMs` if set.
   */
  | { kind: "follow"; timeoutMs?: number }
  /** shell: run the returned ssh command on the user's terminal (when stdout is one). */
  | { kind: "session" }
  /**
   * logs -f: print the tail, then read on from the returned cursor until Ctrl-C; `stampReceived`
   * prefixes each line after the tail with the time the CLI received it (service logs carry none).
   */
  | { kind: "follow-logs"; stampReceived?: boolean }
  /** exec -i / -it: run the command over ssh with the user's stdin (and terminal with `tty`). */
  | { kind: "interactive"; tty: boolean };

/** One option of a subcommand: a `node:util` parseArgs option and its line in `--help`. */
export interface CliOption {
  /** `string` takes a value, `boolean` is a flag. */
  type: "string" | "boolean";
  /** One letter for `-x`. */
  short?: string;
  /** Repeatable; the values arrive as a list (string options only). */
  multiple?: boolean;
  /** Name of the value in `--help` (`-w, --cwd <dir>`); default `value`. */
  value?: string;
  /** One line for the command's `--help`: what the option does, with defaults and units. */
  description: string;
  /** What shell completion offers for the value: template names (`create -t`). */
  completeWith?: "templates";
}

/** How a subcommand of `pi-sandbox` maps onto the action. */
export interface CliMapping {
  /**
   * One line of usage, e.g. `inspect <name> [--template]`, followed by two or more spaces and a few
   * words for the command overview. Empty: the subcommand is not listed.
   */
  usage: string;
  /**
   * Takes several names, as docker's stop/start/rm do: the action runs for each name in turn,
   * each reported, and the command fails if any did.
   */
  eachName?: boolean;
  /** Other subcommand names (`ssh` for `shell`). */
  aliases?: readonly string[];
  /** `node:util` parseArgs options the subcommand takes (`--json` and `--help` are always taken). */
  options?: Record<string, CliOption>;
  /**
   * Other actions the subcommand builds from some inputs (`cp` builds `download` when the source is
   * the guest's): its `--help` lists their arguments too.
   */
  alsoBuilds?: readonly string[];
  /** Its arguments may be `<name>:<path>` (cp): shell completion offers `name:` for each instance. */
  completesRemote?: boolean;
  /** The action object for the parsed input; throw `UsageError` for missing positionals. */
  toAction(input: CliInput): Record<string, unknown> | Promise<Record<string, unknown>>;
  /** How the CLI prints the result instead of `formatText` (list -q, --format), if the input asks. */
  print?(input: CliInput): ((result: never) => string) | undefined;
  /** How the CLI runs the action beyond one call (exec follows its handle); default one call. */
  run?(input: CliInput): CliRun | undefined;
  /** Lines of the subcommand's `--help` after its usage: what the argument docs do not say. */
  notes?: readonly string[];
}

/** Static facts every action module has. */
interface ActionBase<Name extends string, Schema extends v.GenericSchema, Result> {
  /** Action name used in `{"action": …}`. */
  name: Name;
  /** One line shown in help. */
  summary: string;
  /** Arguments in the order help lists them. */
  args: readonly ArgumentDoc[];
  /** Long-running: streams progress events. */
  long?: boolean;
  /** Refused to models; reachable from the CLI and `/sandbox` only. */
  userOnly?: boolean;
  /** Answered by the daemon on the host alone: never resumes an instance that suspended itself. */
  hostOnly?: boolean;
  /** A model's call needs the user's yes: it cannot be undone (destroy). */
  irreversible?: boolean;
  /**
   * Lifecycle work: runs alone in the instance's queue, and never wakes an instance that
   * suspended itself first (`start`: and it ends with the instance running).
   */
  lifecycle?: "queued" | "start";
  /** Valibot schema of the whole action object. */
  schema: Schema;
  /** Checks across arguments the schema cannot express; throws CONTROLLER_BAD_INPUT. */
  refine?(args: v.InferOutput<Schema>): void;
  /** The subcommand of `pi-sandbox`, if any. */
  cli?: CliMapping;
  /** Human-readable CLI output of a result (default: indented JSON); `input` is the action called. */
  formatText?(result: Result, input?: Record<string, unknown>): string;
  /** One line for Pi's renderer, e.g. `exit 0`. */
  brief?(result: Result): string | undefined;
}

/** An action answered in the calling process. */
export interface LocalAction<Name extends string, Schema extends v.GenericSchema, Result> extends ActionBase<
  Name,
  Schema,
  Result
> {
  route: "local";
  /** The handler. */
  run(args: v.InferOutput<Schema>, ctx: LocalContext): Promise<Result>;
}

/** An action answered by the instance's daemon. */
export interface DaemonAction<Name extends string, Schema extends v.GenericSchema, Result> extends ActionBase<
  Name,
  Schema,
  Result
> {
  route: "spawn" | "daemon";
  /** The handler. */
  run(args: v.InferOutput<Schema>, ctx: DaemonContext): Promise<Result>;
  /** Answers without the daemon when it returns a promise (e.g. the controller log); else the daemon runs. */
  runLocally?(args: v.InferOutput<Schema>, ctx: LocalContext): Promise<Result> | undefined;
  /**
   * Instances the client starts, in parallel, once the daemon has answered (fork: each new
   * instance has a daemon of its own); their views come back in the result's `started`.
   */
  startsAfter?(result: Result, args: v.InferOutput<Schema>): readonly string[];
}

/** Any action module. */
export type ActionSpec<
  Name extends string = string,
  Schema extends v.GenericSchema = v.GenericSchema,
  Result = unknown,
> = LocalAction<Name, Schema, Result> | DaemonAction<Name, Schema, Result>;

/** Identity helper that keeps each module's literal name, schema and result types. */
export function defineAction<const Name extends string, Schema extends v.GenericSchema, Result>(
  spec: LocalAction<Name, Schema, Result>,
): LocalAction<Name, Schema, Result>;
export function defineAction<const Name extends string, Schema extends v.GenericSchema, Result>(
  spec: DaemonAction<Name, Schema, Result>,
): DaemonAction<Name, Schema, Result>;
export function defineAction(spec: ActionSpec): ActionSpec {
  return spec;
}

/** A CLI mistake (code `CONTROLLER_USAGE`): the CLI exits 2 and prints the command's usage. */
export class UsageError extends ControllerError {
  constructor(message: string, options: ControllerErrorOptions = {}) {
    super("CONTROLLER_USAGE", message, options);
  }
}

/** The entry view returned by lifecycle actions and inspect. */
export type { EntryView };

/** One action's JSON shape for help and hints: `{"action":"exec", name: string, cmd: string, …}`. */
export function actionUsage(spec: ActionSpec): string {
  const parts = spec.args.map((a) => (a.required ? `${a.name}: ${a.type}` : `${a.name}?: ${a.type}`));
  return `{"action":"${spec.name}"${parts.length ? ", " + parts.join(", ") : ""}}`;
}
