// The guest agent's TCP door (its hello's `door`), kept next to the entry's saved memory: a warm
// start of the same memory, or a copy of a suspended template, attaches through it without an
// exec. Only a warm start reads it: after a cold boot the agent is a new one with a new door.
import { copyFile, rm } from "node:fs/promises";
import { writeJsonAtomic } from "@pi-sandbox/config";
import { agentDoorOf, type AgentDoor } from "@pi-sandbox/supervisor";
import type { EntryKind, StateLayout } from "../state/layout.js";
import { readJson } from "../state/read-json.js";

/** The door the agent of `name`'s last boot gave, or undefined (none, or a file that is not one). */
export async function readAgentDoor(
  layout: StateLayout,
  kind: EntryKind,
  name: string,
): Promise<AgentDoor | undefined> {
  return agentDoorOf(await readJson(layout.agentDoorFile(kind, name)).catch(() => undefined));
}

/** Records the door of the agent just attached (or forgets the last one when it has none). */
export async function writeAgentDoor(
  layout: StateLayout,
  kind: EntryKind,
  name: string,
  door: AgentDoor | undefined,
): Promise<void> {
  const file = layout.agentDoorFile(kind, name);
  if (door) await writeJsonAtomic(file, door);
  else await rm(file, { force: true });
}

/** A copy of a suspended template resumes the template's agent: it gets the template's door. */
export async function copyAgentDoor(layout: StateLayout, from: string, to: string): Promise<void> {
  await copyFile(layout.agentDoorFile("templates", from), layout.agentDoorFile("instances", to)).catch(() => undefined);
}
