// The lifecycle actions: prepare, create, start, stop, destroy. Their work happens in the
// instance's daemon (daemon/lifecycle.ts), one at a time.

import * as v from "valibot";
import { ControllerError } from "../errors.js";
import { defineAction } from "./kit/define.js";
import {
  actionSchema,
  arg,
  CONFIG_FILE,
  idleSuspend,
  idleSuspendArg,
  idleSuspendMs,
  idleSuspendOption,
  kind,
  kindArg,
  kindOption,
  name,
  nameArg,
  positional,
  text,
} from "./kit/parts.js";
import { formatView } from "./kit/text.js";

/** `prepare`: a template from a sandbox.yaml. */
export const prepare = defineAction({
  name: "prepare",
  summary:
    "boot a fresh disk from a sandbox.yaml, run setup, save it as a template (with suspend: its services started and its memory saved too)",
  args: [
    arg("name", "string", true, "template name"),
    arg("config", "string", true, "path to sandbox.yaml on the host", CONFIG_FILE),
    arg(
      "suspend",
      "boolean",
      false,
      "start the services and save the running guest: create -t resumes it instead of booting",
    ),
  ],
  route: "spawn",
  lifecycle: "queued",
  long: true,
  schema: actionSchema("prepare", { name, config: text, suspend: v.optional(v.boolean()) }),
  cli: {
    usage: "prepare <template> -c sandbox.yaml [--suspend]   run setup and save a template",
    options: {
      config: { type: "string", short: "c", value: "file", description: "the sandbox.yaml to prepare from" },
      suspend: {
        type: "boolean",
        description: "also start the services and save the guest's memory: create -t resumes it instead of booting",
      },
    },
    toAction: (input) => ({
      action: "prepare",
      name: positional(input, 0, "a template name", "prepare"),
      config: input.values.config,
      ...(input.values.suspend === true ? { suspend: true } : {}),
    }),
    notes: [
      "With --suspend, each create -t resumes the template's saved guest (services already running)",
      "and then gives it its own machine-id, hostname, ssh host keys and a reseeded kernel random",
      "generator. Random state that programs seeded inside the saved services is shared by every copy.",
    ],
  },
  run: (args, ctx) =>
    ctx.lifecycle.prepare({
      config: args.config,
      configSha256: ctx.guard?.configSha256,
      ...(args.suspend ? { suspend: true } : {}),
    }),
  formatText: formatView,
});

/** `create`: an instance from a sandbox.yaml or a template, started. */
export const create = defineAction({
  name: "create",
  summary: "create an instance from a sandbox.yaml (runs setup) or a template (does not), then start it",
  args: [
    nameArg,
    arg("config", "string", false, "path to sandbox.yaml on the host (exactly one of config, template)", CONFIG_FILE),
    arg("template", "string", false, "template name made by prepare"),
    idleSuspendArg,
  ],
  route: "spawn",
  lifecycle: "start",
  long: true,
  schema: actionSchema("create", {
    name,
    config: v.optional(text),
    template: v.optional(name),
    idleSuspend: v.optional(idleSuspend),
  }),
  refine(args) {
    if ((args.config === undefined) === (args.template === undefined)) {
      throw new ControllerError("CONTROLLER_BAD_INPUT", "create needs exactly one of config or template", {
        details: { action: "create" },
      });
    }
  },
  cli: {
    usage: "create <name> (-c sandbox.yaml | -t template)   a new instance, started",
    options: {
      config: { type: "string", short: "c", value: "file", description: "create from this sandbox.yaml (runs setup)" },
      from: {
        type: "string",
        short: "t",
        value: "template",
        description: "create from a template made by prepare",
        completeWith: "templates",
      },
      "idle-suspend": idleSuspendOption,
    },
    toAction: (input) => ({
      action: "create",
      name: positional(input, 0, "a name", "create"),
      config: input.values.config,
      template: input.values.from,
      idleSuspend: input.values["idle-suspend"],
    }),
  },
  run: (args, ctx) =>
    ctx.lifecycle.create({
      config: args.config,
      template: args.template,
      configSha256: ctx.guard?.configSha256,
      ...(args.idleSuspend !== undefined ? { idleSuspendMs: idleSuspendMs(args.idleSuspend) } : {}),
    }),
  formatText: formatView,
});

/** `start`: reopen the last checkpoint. */
export const start = defineAction({
  name: "start",
  summary:
    "reconnect to a running instance, resume a suspended one, or reopen its last checkpoint, run resume hooks and services",
  args: [nameArg, idleSuspendArg],
  route: "spawn",
  lifecycle: "start",
  long: true,
  schema: actionSchema("start", { name, idleSuspend: v.optional(idleSuspend) }),
  cli: {
    eachName: true,
    usage: "start <name>… [--idle-suspend 15m]   start, resume or reconnect instances",
    options: { "idle-suspend": idleSuspendOption },
    toAction: (input) => ({
      action: "start",
      name: positional(input, 0, "a name", "start"),
      idleSuspend: input.values["idle-suspend"],
    }),
  },
  run: (args, ctx) =>
    ctx.lifecycle.start(args.idleSuspend !== undefined ? { idleSuspendMs: idleSuspendMs(args.idleSuspend) } : {}),
  formatText: formatView,
});

/** `stop`: cut clients, stop services, checkpoint; of a suspended instance, drop its memory. */
export const stop = defineAction({
  name: "stop",
  summary:
    "cut preview and terminal clients, stop services, checkpoint the disk (a suspended instance: delete its saved memory)",
  args: [nameArg],
  // Spawns a daemon when none runs: a suspended instance has none, and its memory file must go.
  route: "spawn",
  lifecycle: "queued",
  long: true,
  schema: actionSchema("stop", { name }),
  cli: {
    eachName: true,
    usage: "stop <name>…   stop instances (the disk stays)",
    toAction: (input) => ({ action: "stop", name: positional(input, 0, "a name", "stop") }),
  },
  run: (_args, ctx) => ctx.lifecycle.stop(),
  formatText: formatView,
});

/** `destroy`: remove an entry for good. */
export const destroy = defineAction({
  name: "destroy",
  summary: "irreversibly remove an instance (or template), its disk and logs",
  args: [nameArg, arg("confirm", "string", true, "must equal name"), kindArg],
  route: "spawn",
  lifecycle: "queued",
  long: true,
  irreversible: true,
  schema: actionSchema("destroy", { name, confirm: v.string(), kind: v.optional(kind) }),
  cli: {
    eachName: true,
    usage: "destroy <name>… [-f | --confirm <name>] [--template]   remove instances, their disks and logs",
    aliases: ["rm"],
    options: {
      force: { type: "boolean", short: "f", description: "confirm each name without asking" },
      confirm: { type: "string", value: "name", description: "confirm by repeating the name (one name)" },
      template: { type: "boolean", description: "destroy a template, not an instance" },
      templates: { type: "boolean", description: "the same as --template" },
    },
    toAction: (input) => ({
      action: "destroy",
      name: positional(input, 0, "a name", "destroy"),
      // -f confirms every name; without it or --confirm, the CLI asks on a terminal.
      confirm:
        input.values.force === true
          ? positional(input, 0, "a name", "destroy")
          : typeof input.values.confirm === "string"
            ? input.values.confirm
            : "",
      ...kindOption(input),
    }),
  },
  run: (args, ctx) => ctx.lifecycle.destroy(args.confirm),
  formatText: (result) => `destroyed ${result.kind === "templates" ? "template" : "instance"} ${result.destroyed}\n`,
});
