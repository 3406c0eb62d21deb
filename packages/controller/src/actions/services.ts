// services, service-start and preview: supervised services and localhost previews.

import * as v from "valibot";
import { LIMITS, isCodedError } from "@pi-sandbox/config";
import type { ServicesResult, SupervisorErrorCode } from "@pi-sandbox/supervisor";
import type { ServicesView } from "./kit/context.js";
import { ControllerError } from "../errors.js";
import { defineAction } from "./kit/define.js";
import {
  actionSchema,
  arg,
  folder,
  intOption,
  label,
  link,
  name,
  nameArg,
  GUEST_PATH,
  port,
  positional,
  prose,
  text,
} from "./kit/parts.js";

const OPS = ["ensure", "status", "restart", "stop"] as const;

/** `services`: ensure, status, restart or stop declared services. */
export const services = defineAction({
  name: "services",
  summary: "ensure (start missing), status, restart or stop services from the guest .sandbox.yaml",
  args: [
    nameArg,
    arg("op", '"ensure"|"status"|"restart"|"stop"', true, "what to do"),
    arg(
      "service",
      "string",
      false,
      "act on this one only (ensure: a declared one; others: declared or ad-hoc); omitted = all; unknown = SERVICE_NOT_FOUND",
    ),
  ],
  route: "daemon",
  schema: actionSchema("services", { name, op: v.picklist(OPS), service: v.optional(text) }),
  cli: {
    usage: "services <name> <ensure|status|restart|stop> [service]   the guest's services",
    toAction: (input) => ({
      action: "services",
      name: positional(input, 0, "a name", "services"),
      op: positional(input, 1, "an op", "services"),
      service: input.positionals[2],
    }),
  },
  async run(args, ctx): Promise<ServicesView | ServicesResult | Awaited<ReturnType<typeof ctx.guest.serviceStatus>>> {
    const names = args.service !== undefined ? [args.service] : undefined;
    try {
      switch (args.op) {
        case "status":
          return await ctx.guest.serviceStatus(names);
        case "stop":
          return await ctx.guest.stopServices(names);
        case "restart":
          return await ctx.guest.restartServices(names);
        default:
          return await ctx.guest.ensureServices(names);
      }
    } catch (error) {
      // By code, not isSupervisorError: the client loads this module, and importing the supervisor
      // would load its whole agent client there. Only the supervisor raises this code.
      if (!isCodedError(error) || error.code !== ("SERVICE_NOT_FOUND" satisfies SupervisorErrorCode)) throw error;
      throw new ControllerError("SERVICE_NOT_FOUND", error.message, {
        hint: `List the services with {"action":"services","name":"${args.name}","op":"status"}; declare new ones in the guest .sandbox.yaml, or start one with service-start.`,
        details: error.details,
        cause: error,
      });
    }
  },
});

/** `service-start`: an ad-hoc supervised service. */
export const serviceStart = defineAction({
  name: "service-start",
  summary: `start an ad-hoc supervised service (not in the guest YAML); waits up to ${LIMITS.adhocReadinessMs / 1000} s for readiness`,
  args: [
    nameArg,
    arg("service", "string", true, "service name, not one declared in the guest YAML"),
    arg("command", "string", true, "foreground login-shell command; $PORT is set", "none"),
    arg("cwd", "string", false, "workspace-relative", GUEST_PATH),
    arg("port", "integer", false, "guest port; omitted = allocated and kept", "none"),
    arg("env", "object", false, "NAME -> string; not PORT or PUBLIC_URL", "none"),
    arg("health", "string", false, '"/path" for HTTP, "process", omitted = TCP', "none"),
    arg("preview", "boolean", false, "give it a localhost preview", "none"),
    arg("previews", "array", false, "extra links {url,title,description?} or {folder,links}"),
    arg("title", "string", false, "preview title"),
    arg("description", "string", false, "preview description"),
  ],
  route: "daemon",
  schema: actionSchema("service-start", {
    name,
    service: text,
    command: text,
    cwd: v.optional(v.string()),
    port: v.optional(port),
    env: v.optional(v.record(v.string(), v.string())),
    health: v.optional(v.string()),
    preview: v.optional(v.boolean()),
    previews: v.optional(v.array(v.union([link, folder]))),
    title: v.optional(label),
    description: v.optional(prose),
  }),
  refine(args) {
    const reserved = Object.keys(args.env ?? {}).filter((key) => key === "PORT" || key === "PUBLIC_URL");
    if (reserved.length > 0) {
      throw new ControllerError(
        "CONTROLLER_BAD_INPUT",
        `service-start: env may not set ${reserved.join(" or ")}; the supervisor sets PORT to the service's port and PUBLIC_URL to its preview URL`,
        { details: { action: "service-start", reserved } },
      );
    }
  },
  run(args, ctx) {
    const links: { url: string; title: string; description?: string; folder?: string }[] = [];
    if (args.preview === true) {
      links.push({
        url: "/",
        title: args.title ?? args.service,
        ...(args.description ? { description: args.description } : {}),
      });
    }
    for (const entry of args.previews ?? []) {
      if ("folder" in entry) for (const l of entry.links) links.push({ ...l, folder: entry.folder });
      else links.push(entry);
    }
    const health = args.health;
    return ctx.guest.startService(
      {
        name: args.service,
        command: args.command,
        ...(args.cwd !== undefined ? { cwd: args.cwd } : {}),
        ...(args.port !== undefined ? { port: args.port } : {}),
        ...(args.env !== undefined ? { env: args.env } : {}),
        health:
          health === undefined
            ? { kind: "tcp" }
            : health === "process"
              ? { kind: "process" }
              : { kind: "http", path: health },
      },
      links.length > 0 ? { links } : undefined,
    );
  },
});

/** `preview`: a localhost URL for an already-listening guest server. */
export const preview = defineAction({
  name: "preview",
  summary: "link an already-listening guest HTTP server to a localhost URL (not supervised)",
  args: [
    nameArg,
    arg("port", "integer", true, "guest port", "none"),
    arg("title", "string", false, "link title"),
    arg("description", "string", false, "link description"),
  ],
  route: "daemon",
  schema: actionSchema("preview", { name, port, title: v.optional(label), description: v.optional(prose) }),
  cli: {
    usage: "preview <name> <guest-port> [--title t]   a localhost URL for a guest HTTP port",
    options: { title: { type: "string", value: "text", description: "the preview's title" } },
    toAction: (input) => ({
      action: "preview",
      name: positional(input, 0, "a name", "preview"),
      port: intOption(positional(input, 1, "a guest port", "preview"), "port"),
      title: input.values.title,
    }),
  },
  run: (args, ctx) =>
    ctx.guest.openPreview({
      port: args.port,
      ...(args.title !== undefined ? { title: args.title } : {}),
      ...(args.description !== undefined ? { description: args.description } : {}),
    }),
});
