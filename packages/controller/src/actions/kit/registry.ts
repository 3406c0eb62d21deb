// Every action, in the order help lists them: one registration line per action module.

import type * as v from "valibot";
import type { ActionSpec, DaemonAction, LocalAction } from "./define.js";
import { audit, auditVerify } from "../audit.js";
import { checkpoint, checkpointRm, checkpoints, rewind } from "../checkpoints.js";
import { contextAdd, contextList, contextRm, contextUse } from "../context.js";
import { dashboard } from "../dashboard.js";
import { doctor } from "../doctor.js";
import { egress, egressApprove, egressDeny, egressRevoke } from "../egress.js";
import { egressWatch } from "../egress-watch.js";
import { exec, execKill, execStatus } from "../exec.js";
import { fork } from "../fork.js";
import { download, upload } from "../copy.js";
import { apply, diff, workspaceExport } from "../diff.js";
import { read, write } from "../files.js";
import { helpAction } from "../help.js";
import { imageBuild, imageImport, imageInspect, imageList, imageRm } from "../image.js";
import { imagePush } from "../image-push.js";
import { init } from "../init.js";
import { inspect } from "../inspect.js";
import { create, destroy, prepare, start, stop } from "../lifecycle.js";
import { list } from "../list.js";
import { logs } from "../logs.js";
import { secrets } from "../secrets.js";
import { secretsAdd } from "../secrets-add.js";
import { preview, serviceStart, services } from "../services.js";
import { shell } from "../shell.js";
import { suspend } from "../suspend.js";

/** Every action module. The single source of validation, routing, handlers, CLI mapping and help. */
export const ACTIONS = [
  helpAction,
  list,
  inspect,
  prepare,
  create,
  start,
  stop,
  suspend,
  destroy,
  fork,
  checkpoint,
  checkpoints,
  checkpointRm,
  rewind,
  audit,
  auditVerify,
  egress,
  egressApprove,
  egressDeny,
  egressRevoke,
  egressWatch,
  exec,
  execStatus,
  execKill,
  read,
  write,
  upload,
  download,
  diff,
  apply,
  workspaceExport,
  logs,
  services,
  serviceStart,
  preview,
  secrets,
  secretsAdd,
  doctor,
  dashboard,
  shell,
  init,
  imageBuild,
  imageList,
  imageInspect,
  imageRm,
  imageImport,
  imagePush,
  contextAdd,
  contextList,
  contextUse,
  contextRm,
] as const;

type AnyAction = (typeof ACTIONS)[number];

/** Names of every action. */
export type ActionName = AnyAction["name"];

/** The action module of one name. */
export type ActionOf<N extends ActionName> = Extract<AnyAction, { name: N }>;

/** What an action resolves with. */
export type ActionResult<N extends ActionName> =
  ActionOf<N> extends LocalAction<N, v.GenericSchema, infer R>
    ? R
    : ActionOf<N> extends DaemonAction<N, v.GenericSchema, infer R>
      ? R
      : never;

/** The JSON input of an action (what its schema accepts). */
export type ActionInput<N extends ActionName> = v.InferInput<ActionOf<N>["schema"]>;

/** Looks up an action by name. */
export function findAction(actionName: string): ActionSpec | undefined {
  return (ACTIONS as readonly ActionSpec[]).find((spec) => spec.name === actionName);
}

/** Looks up an action by CLI subcommand (its name or an alias). */
export function findCliAction(command: string): ActionSpec | undefined {
  return (ACTIONS as readonly ActionSpec[]).find(
    (spec) => spec.cli && (spec.name === command || spec.cli.aliases?.includes(command)),
  );
}

/** Commands written as two words on the command line: `image build` is the action `image-build`. */
export const COMMAND_GROUPS: readonly string[] = ["image", "checkpoint", "audit", "context", "egress"];
