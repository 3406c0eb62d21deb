import * as v from "valibot";
import { LIMITS } from "@pi-sandbox/config";

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
}

/** How an action is executed. */
export type ActionRoute =
  /** Answered from state files in the calling process, no daemon. */
  | "local"
  /** Needs the instance's daemon, which is spawned if not running. */
  | "spawn"
  /** Needs a running daemon; fails with CONTROLLER_NOT_RUNNING otherwise. */
  | "daemon";

/** Static description of one action: its schema, documentation and routing. */
export interface ActionSpec {
  /** Action name used in `{"action": …}`. */
  name: string;
  /** One line shown in help. */
  summary: string;
  /** Arguments in the order help lists them. */
  args: ArgumentDoc[];
  /** Where it runs. */
  route: ActionRoute;
  /** Long-running: streams progress events. */
  long?: boolean;
  /** Refused to models; reachable from the CLI and `/sandbox` only. */
  userOnly?: boolean;
  /** Valibot schema of the whole action object. */
  schema: v.GenericSchema;
}

/** Instance/template names are checked after the schema, so a bad one gets CONTROLLER_INVALID_NAME. */
const name = v.string();
const text = v.pipe(v.string(), v.minLength(1));
const waitMs = v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(LIMITS.execWaitMaxMs));
const port = v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(65535));
const kind = v.picklist(["instances", "templates"]);
const link = v.strictObject({ url: v.string(), title: v.string(), description: v.optional(v.string()) });
const folder = v.strictObject({ folder: v.string(), links: v.array(link) });

function action<const A extends string, E extends v.ObjectEntries>(
  actionName: A,
  entries: E,
): v.StrictObjectSchema<{ action: v.LiteralSchema<A, undefined> } & E, undefined> {
  return v.strictObject({ action: v.literal(actionName), ...entries });
}

const arg = (argName: string, type: string, required: boolean, text: string): ArgumentDoc => ({
  name: argName,
  type,
  required,
  text,
});

const nameArg = arg("name", "string", true, "instance name: a lowercase letter, then up to 39 of a-z, 0-9, '-'");
const timeoutArg = arg(
  "timeoutMs",
  "integer",
  false,
  `how long to wait, 0-${LIMITS.execWaitMaxMs} ms, default ${LIMITS.execWaitDefaultMs}; only the wait ends, the command keeps running`,
);

/** Every action, in the order help lists them. The single source of validation and help. */
export const ACTIONS: readonly ActionSpec[] = [
  {
    name: "help",
    summary: "this text: actions, arguments, YAML keys, profiles and limits",
    args: [],
    route: "local",
    schema: action("help", {}),
  },
  {
    name: "list",
    summary: "list instances (or templates) with their state",
    args: [arg("kind", '"instances"|"templates"', false, "which namespace, default instances")],
    route: "local",
    schema: action("list", { kind: v.optional(kind) }),
  },
  {
    name: "inspect",
    summary: "state, resources, disk, accelerator, previews, errors and a recovery hint",
    args: [nameArg, arg("kind", '"instances"|"templates"', false, "default instances")],
    route: "local",
    schema: action("inspect", { name, kind: v.optional(kind) }),
  },
  {
    name: "prepare",
    summary: "boot a fresh disk from a sandbox.yaml, run setup, save it as a template (no services)",
    args: [
      arg("name", "string", true, "template name"),
      arg("config", "string", true, "path to sandbox.yaml on the host"),
    ],
    route: "spawn",
    long: true,
    schema: action("prepare", { name, config: text }),
  },
  {
    name: "create",
    summary: "create an instance from a sandbox.yaml (runs setup) or a template (does not), then start it",
    args: [
      nameArg,
      arg("config", "string", false, "path to sandbox.yaml on the host (exactly one of config, template)"),
      arg("template", "string", false, "template name made by prepare"),
    ],
    route: "spawn",
    long: true,
    schema: action("create", { name, config: v.optional(text), template: v.optional(name) }),
  },
  {
    name: "start",
    summary: "reconnect to a running instance, or reopen its last checkpoint, run resume hooks and services",
    args: [nameArg],
    route: "spawn",
    long: true,
    schema: action("start", { name }),
  },
  {
    name: "stop",
    summary: "cut preview and terminal clients, stop services, checkpoint the disk",
    args: [nameArg],
    route: "daemon",
    long: true,
    schema: action("stop", { name }),
  },
  {
    name: "destroy",
    summary: "irreversibly remove an instance (or template), its disk and logs",
    args: [
      nameArg,
      arg("confirm", "string", true, "must equal name"),
      arg("kind", '"instances"|"templates"', false, "default instances"),
    ],
    route: "spawn",
    long: true,
    schema: action("destroy", { name, confirm: v.string(), kind: v.optional(kind) }),
  },
  {
    name: "exec",
    summary: "run a command in a guest login shell; returns output, or a handle if still running",
    args: [
      nameArg,
      arg("cmd", "string", true, "shell command"),
      arg("cwd", "string", false, "workspace-relative directory, default the workspace"),
      timeoutArg,
    ],
    route: "daemon",
    schema: action("exec", { name, cmd: text, cwd: v.optional(v.string()), timeoutMs: v.optional(waitMs) }),
  },
  {
    name: "exec-status",
    summary: "wait for a running command; returns only output not returned before",
    args: [nameArg, arg("pid", "string", true, "handle returned by exec"), timeoutArg],
    route: "daemon",
    schema: action("exec-status", { name, pid: text, timeoutMs: v.optional(waitMs) }),
  },
  {
    name: "exec-kill",
    summary: "terminate a running command and its whole process group",
    args: [nameArg, arg("pid", "string", true, "handle returned by exec")],
    route: "daemon",
    schema: action("exec-kill", { name, pid: text }),
  },
  {
    name: "read",
    summary: `read a guest text file (at most ${LIMITS.outputMaxBytes / 1024} KiB, truncation marked)`,
    args: [nameArg, arg("path", "string", true, "absolute guest path")],
    route: "daemon",
    schema: action("read", { name, path: text }),
  },
  {
    name: "write",
    summary: `write a guest text file (at most ${LIMITS.writeMaxBytes / 1024 / 1024} MiB; the parent directory must exist)`,
    args: [nameArg, arg("path", "string", true, "absolute guest path"), arg("content", "string", true, "file text")],
    route: "daemon",
    schema: action("write", { name, path: text, content: v.string() }),
  },
  {
    name: "logs",
    summary: "tail of a service's log, or of the controller log",
    args: [
      nameArg,
      arg("service", "string", false, "service name; omitted = controller log"),
      arg("lines", "integer", false, `default ${LIMITS.logLinesDefault}, max ${LIMITS.logLinesMax}`),
    ],
    route: "local",
    schema: action("logs", {
      name,
      service: v.optional(text),
      lines: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(LIMITS.logLinesMax))),
    }),
  },
  {
    name: "services",
    summary: "ensure (start missing), status, restart or stop services from the guest .sandbox.yaml",
    args: [
      nameArg,
      arg("op", '"ensure"|"status"|"restart"|"stop"', true, "what to do"),
      arg("service", "string", false, "one service; omitted = all"),
    ],
    route: "daemon",
    schema: action("services", {
      name,
      op: v.picklist(["ensure", "status", "restart", "stop"]),
      service: v.optional(text),
    }),
  },
  {
    name: "service-start",
    summary: `start an ad-hoc supervised service (not in the guest YAML); waits up to ${LIMITS.adhocReadinessMs / 1000} s for readiness`,
    args: [
      nameArg,
      arg("service", "string", true, "service name, not one declared in the guest YAML"),
      arg("command", "string", true, "foreground login-shell command; $PORT is set"),
      arg("cwd", "string", false, "workspace-relative"),
      arg("port", "integer", false, "guest port; omitted = allocated and kept"),
      arg("env", "object", false, "NAME -> string; not PORT or PUBLIC_URL"),
      arg("health", "string", false, '"/path" for HTTP, "process", omitted = TCP'),
      arg("preview", "boolean", false, "give it a localhost preview"),
      arg("previews", "array", false, "extra links {url,title,description?} or {folder,links}"),
      arg("title", "string", false, "preview title"),
      arg("description", "string", false, "preview description"),
    ],
    route: "daemon",
    schema: action("service-start", {
      name,
      service: text,
      command: text,
      cwd: v.optional(v.string()),
      port: v.optional(port),
      env: v.optional(v.record(v.string(), v.string())),
      health: v.optional(v.string()),
      preview: v.optional(v.boolean()),
      previews: v.optional(v.array(v.union([link, folder]))),
      title: v.optional(v.string()),
      description: v.optional(v.string()),
    }),
  },
  {
    name: "preview",
    summary: "link an already-listening guest HTTP server to a localhost URL (not supervised)",
    args: [
      nameArg,
      arg("port", "integer", true, "guest port"),
      arg("title", "string", false, "link title"),
      arg("description", "string", false, "link description"),
    ],
    route: "daemon",
    schema: action("preview", { name, port, title: v.optional(v.string()), description: v.optional(v.string()) }),
  },
  {
    name: "doctor",
    summary: "check Node, QEMU, qemu-img, accelerator, state-dir permissions and (with config) the image",
    args: [arg("config", "string", false, "sandbox.yaml whose image to check")],
    route: "local",
    schema: action("doctor", { config: v.optional(text) }),
  },
  {
    name: "shell",
    summary: "user-only: a temporary ssh command into the guest (use /sandbox <name> in Pi)",
    args: [nameArg, arg("user", "string", false, "guest user, default root")],
    route: "daemon",
    userOnly: true,
    schema: action("shell", { name, user: v.optional(v.pipe(v.string(), v.regex(/^[a-z_][a-z0-9_-]{0,31}$/))) }),
  },
];

/** Looks up an action by name. */
export function findAction(actionName: string): ActionSpec | undefined {
  return ACTIONS.find((spec) => spec.name === actionName);
}
