// Helper process for the stop fault test: boots the disk, reports what it finds, writes a new
// generation of data WITHOUT syncing, and stops or suspends (the parent SIGKILLs it somewhere in
// that stop). Mode `live:<tag>`: removes /srv/live-2, writes and syncs /srv/live-1, takes a live checkpoint, writes and
// syncs /srv/live-2, and waits for the parent's SIGKILL.
// Usage: node <ts flags> stop-child.ts <diskDir> <stateRoot> <generation|check|live:tag> [stop|suspend]
import { runInGuest, startVm } from "../../src/index.js";

const [diskDir, stateRoot, mode, how = "stop"] = process.argv.slice(2) as [string, string, string, string?];
const say = (event: Record<string, unknown>) => process.stdout.write(JSON.stringify(event) + "\n");

const vm = await startVm({
  name: "fault",
  diskDir,
  stateRoot,
  spec: { resources: { cpus: 1, memoryGiB: 1 }, network: { allowedHosts: [] } },
  startTimeoutMs: 600_000,
});
// What the last checkpoint holds: the marker, and whether the blob matches the checksum written
// in the same run (a torn checkpoint would pair one run's marker with another run's blob).
const seen = await runInGuest(
  vm,
  "cat /srv/marker 2>/dev/null || echo none; if [ -f /srv/blob.sha ]; then cd /srv && sha256sum -c --quiet blob.sha && echo blob-ok || echo blob-bad; else echo blob-none; fi",
);
const [marker, blob] = seen.stdout.trim().split("\n");
const live = await runInGuest(vm, "cat /srv/live-1 /srv/live-2 2>/dev/null | tr '\\n' ' '");
say({
  event: "booted",
  marker,
  blob,
  live: live.stdout.trim(),
  qemuPid: vm.hostPid,
  warm: vm.restore?.warm ?? false,
  recovery: vm.recovery?.outcome ?? null,
});
if (mode === "check") {
  await vm.close();
  process.exit(0);
}
if (mode.startsWith("live:")) {
  const tag = mode.slice("live:".length);
  const sync = (file: string, text: string) => runInGuest(vm, `echo ${text} > ${file} && sync`);
  await runInGuest(vm, "rm -f /srv/live-2");
  await sync("/srv/live-1", `${tag}1`);
  const checkpoint = await vm.checkpoint();
  say({ event: "checkpointed", ...checkpoint });
  await sync("/srv/live-2", `${tag}2`);
  say({ event: "written" });
  // Kept alive (QEMU's pipes may not hold the loop) until the parent's SIGKILL.
  setInterval(() => undefined, 60_000);
}
// Unsynced on purpose: the stop's own sync must capture it.
const write = await runInGuest(
  vm,
  `head -c 8388608 /dev/urandom > /srv/blob && cd /srv && sha256sum blob > blob.sha && echo ${mode} > /srv/marker`,
);
if (write.exitCode !== 0) throw new Error(`guest write failed: ${write.stderr}`);
say({ event: "stopping" });
const result = how === "suspend" ? await vm.suspend() : await vm.stop();
say({ event: "stopped", totalMs: Math.round(result.totalMs) });
process.exit(0);
