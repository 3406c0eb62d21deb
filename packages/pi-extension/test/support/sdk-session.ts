// An in-process Pi session (SDK + pi-ai's faux provider) running this package's extension with an
// injected controller client. Faster than a Pi process and lets tests control the controller.

import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fauxAssistantMessage, fauxProvider, fauxToolCall, type FauxResponseStep } from "@earendil-works/pi-ai";
import {
  createAgentSession,
  DefaultResourceLoader,
  ModelRuntime,
  SessionManager,
  SettingsManager,
  type AgentSession,
  type ExtensionFactory,
} from "@earendil-works/pi-coding-agent";
import { createSandboxExtension, type CallActionFn } from "../../src/index.js";
import type { Json } from "./pi-harness.js";

/** A session plus every event it emitted. */
export interface SdkSession {
  session: AgentSession;
  events: Json[];
  cwd: string;
  close(): Promise<void>;
}

/** A faux reply that calls the sandbox tool with raw (unprepared) arguments. */
export function callSandbox(args: unknown, id?: string): FauxResponseStep {
  return fauxAssistantMessage(
    fauxToolCall("sandbox", args as Parameters<typeof fauxToolCall>[1], id ? { id } : undefined),
    {
      stopReason: "toolUse",
    },
  );
}

/** A faux reply that ends the turn. */
export const done: FauxResponseStep = fauxAssistantMessage("done");

/**
 * Starts a session whose model replays `responses`; `env` is the extension's environment,
 * `extensions` more extensions loaded after this package's.
 */
export async function startSdkSession(
  callAction: CallActionFn,
  responses: FauxResponseStep[],
  options: { env?: NodeJS.ProcessEnv; extensions?: ExtensionFactory[] } = {},
): Promise<SdkSession> {
  const dir = await mkdtemp(join(tmpdir(), "pss-"));
  const cwd = join(dir, "work");
  const agentDir = join(dir, "agent");
  await mkdir(cwd);
  const faux = fauxProvider();
  faux.setResponses(responses);
  const modelRuntime = await ModelRuntime.create({
    authPath: join(agentDir, "auth.json"),
    modelsPath: null,
    allowModelNetwork: false,
  });
  modelRuntime.registerNativeProvider(faux.provider);
  const settingsManager = SettingsManager.inMemory({ retry: { enabled: false } });
  const resourceLoader = new DefaultResourceLoader({
    cwd,
    agentDir,
    settingsManager,
    noExtensions: true,
    noSkills: true,
    noPromptTemplates: true,
    noThemes: true,
    noContextFiles: true,
    extensionFactories: [
      createSandboxExtension({ callAction, ...(options.env ? { env: options.env } : {}) }),
      ...(options.extensions ?? []),
    ],
  });
  await resourceLoader.reload();
  const { session } = await createAgentSession({
    cwd,
    agentDir,
    model: faux.getModel(),
    modelRuntime,
    resourceLoader,
    settingsManager,
    sessionManager: SessionManager.inMemory(cwd),
  });
  const events: Json[] = [];
  session.subscribe((event) => {
    events.push(event as unknown as Json);
  });
  return {
    session,
    events,
    cwd,
    close: async () => {
      session.dispose();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
