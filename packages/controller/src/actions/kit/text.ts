// Plain-text rendering shared by the actions' CLI formatters. Results carry guest text (preview
// titles, agent error messages) as it came; every field is escaped here with the config's
// `escapeControlChars`, and the CLI escapes its whole output once more before writing it.

import { HOST_SERVICES_HOSTNAME, escapeControlChars, formatDuration } from "@pi-sandbox/config";
import type { QemuResidentMemory } from "@pi-sandbox/vm/host";
import type { EntryView } from "../../state/inspect.js";

/** One-line text for a terminal: every control character escaped visibly (`\x1b`, `\n`). */
export function oneLine(value: string): string {
  return escapeControlChars(value);
}

/**
 * Multi-line text under a `key:` label: control characters escaped except line breaks and tabs,
 * and every further line indented by `indent` so it cannot pass for another `key:` line.
 */
export function indented(value: string, indent: string): string {
  return escapeControlChars(value, { multiline: true }).replace(/\r?\n/g, `\n${indent}`);
}

/** Left-aligned columns, two spaces apart. Cells are escaped to one line before widths are taken. */
export function table(rows: string[][]): string {
  const cells = rows.map((r) => r.map(oneLine));
  const widths = cells[0]!.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
  return (
    cells
      .map((r) =>
        r
          .map((c, i) => c.padEnd(widths[i]!))
          .join("  ")
          .trimEnd(),
      )
      .join("\n") + "\n"
  );
}

const INDENT = " ".repeat("accelerator: ".length);

/** An entry view as `key: value` lines. */
export function formatView(view: EntryView): string {
  const lines = [
    `name:        ${oneLine(view.name)} (${view.kind === "templates" ? "template" : "instance"})`,
    `state:       ${oneLine(stateText(view))}`,
    `created:     ${oneLine(view.createdAt)}${view.template ? ` from template ${oneLine(view.template)}` : ""}${
      view.forkedFrom ? ` as a fork of ${oneLine(view.forkedFrom.name)}` : ""
    }`,
    `resources:   ${view.resources.cpus} cpu, ${view.resources.memoryGiB} GiB memory, ${view.diskGiB} GiB disk`,
  ];
  if (view.hostPorts?.length)
    lines.push(`host ports:  ${view.hostPorts.map((port) => `${HOST_SERVICES_HOSTNAME}:${port}`).join(", ")}`);
  for (const secret of view.secrets ?? [])
    lines.push(
      `secret:      ${oneLine(secret.name)} → ${secret.hosts.map(oneLine).join(", ")} (value kept on the host)`,
    );
  for (const mount of view.mounts ?? [])
    lines.push(`mount:       ${oneLine(mount.host)} → ${oneLine(mount.guest)} (read-only)`);
  if (view.accelerator)
    lines.push(
      `accelerator: ${oneLine(view.accelerator)}${view.acceleratorReason ? ` (${oneLine(view.acceleratorReason)})` : ""}`,
    );
  for (const p of view.previews)
    lines.push(`preview:     ${oneLine(p.url)}  ${oneLine(p.title)}${p.folder ? ` [${oneLine(p.folder)}]` : ""}`);
  if (view.previewAddress?.shared)
    lines.push(
      `previews on: ${oneLine(view.previewAddress.address)}, shared: ${indented(view.previewAddress.shared, INDENT)}`,
    );
  if (view.restore)
    lines.push(
      view.restore.warm
        ? `restore:     resumed from saved memory in ${(view.restore.restoreMs / 1000).toFixed(1)} s`
        : `restore:     booted cold: ${indented(view.restore.reason, INDENT)}`,
    );
  if (view.recovery)
    lines.push(
      view.recovery.outcome === "recovered"
        ? `recovered:   the disk as of ${view.recovery.lastWriteAt}, when its controller stopped without a checkpoint`
        : `recovered:   no; the run that ended without a checkpoint was set aside, and the checkpoint of ${view.recovery.reopened.at} reopened`,
    );
  for (const layer of view.setAside ?? [])
    lines.push(
      `set aside:   ${oneLine(layer.path)} (${formatMiB(layer.bytes)}, last written ${layer.lastWriteAt}): ${indented(layer.reason, INDENT)}`,
    );
  if (view.lastStart)
    lines.push(
      `last start:  ${(view.lastStart.ms / 1000).toFixed(1)} s (${view.lastStart.warm ? "resumed" : "booted"}) at ${view.lastStart.at}`,
    );
  if (view.checkpoint) lines.push(`checkpoint:  ${oneLine(checkpointText(view.checkpoint))}`);
  if (view.kept) {
    const newest = view.kept.newest;
    lines.push(
      `kept:        ${view.kept.count} checkpoint(s), ${formatMiB(view.kept.bytes)} beyond the disk; newest ${newest.id} (${newest.kind}${newest.label ? `, ${oneLine(newest.label)}` : ""}) at ${newest.createdAt}`,
    );
  }
  if (view.savedMemory)
    lines.push(
      `memory:      ${formatMiB(view.savedMemory.bytes)} saved running; create -t resumes it instead of booting`,
    );
  if (view.usage)
    lines.push(
      `usage:       ${view.usage.cpuPercent.toFixed(1)} % CPU, ${formatMiB(view.usage.rssBytes)} resident (QEMU)`,
    );
  if (view.usage?.memory) lines.push(`resident:    ${residentText(view.usage.memory)}`);
  if (view.idle) lines.push(`idle:        ${oneLine(idleText(view.idle))}`);
  if (view.resumePid) lines.push(`resume:      still running, handle ${oneLine(view.resumePid)}`);
  for (const e of view.errors)
    lines.push(
      `error:       ${oneLine(e.code)}: ${indented(e.message, INDENT)}${e.hint ? ` (${indented(e.hint, INDENT)})` : ""}`,
    );
  if (view.hint) lines.push(`hint:        ${indented(view.hint, INDENT)}`);
  return lines.join("\n") + "\n";
}

/** The state as list and inspect print it: `suspended (idle)` for an instance that suspended itself. */
export function stateText(view: EntryView): string {
  return view.idle?.suspended ? `${view.state} (idle)` : view.state;
}

/** The auto-suspend setting and clock in words. */
function idleText(idle: NonNullable<EntryView["idle"]>): string {
  const setting = `suspends after ${formatDuration(idle.suspendAfterMs)} unused`;
  if (idle.suspended) return `suspended while unused; a preview request or an action resumes it`;
  if (idle.busy) return `${setting}; in use: ${idle.busy}`;
  if (idle.idleForMs !== undefined) return `${setting}; unused for ${formatDuration(idle.idleForMs)}`;
  return setting;
}

/** Automatic checkpoints in words: the setting, and the last one. */
function checkpointText(checkpoint: NonNullable<EntryView["checkpoint"]>): string {
  if (checkpoint.everyMs === null) return "off (the disk is checkpointed at stop and suspend only)";
  const setting = `every ${formatDuration(checkpoint.everyMs)} of use`;
  const last = checkpoint.last;
  if (!last) return setting;
  return `${setting}; last at ${last.at} (checkpoint ${last.generation}, guest stalled ${Math.round(last.stallMs)} ms)`;
}

/**
 * Where a QEMU's resident memory is: the guest's RAM, TCG's translation cache (named only when
 * there is one: KVM and HVF have none) and QEMU itself.
 */
function residentText(memory: QemuResidentMemory): string {
  const parts = [`guest memory ${formatMiB(memory.guestBytes)}`];
  if (memory.translationCacheBytes > 0)
    parts.push(
      `translation cache ${formatMiB(memory.translationCacheBytes)} (software emulation keeps it while it runs)`,
    );
  parts.push(`QEMU itself ${formatMiB(memory.otherBytes)}`);
  return parts.join(", ");
}

/** Bytes as MiB with one decimal, e.g. `412.3 MiB`. */
export function formatMiB(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** A line ending with exactly one newline (none added to empty text). */
export function line(textValue: string): string {
  return textValue.endsWith("\n") || textValue === "" ? textValue : `${textValue}\n`;
}
