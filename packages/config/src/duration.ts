// Durations as people write them in sandbox.yaml and on the command line (`20s`, `15m`, `1h30m`),
// parsed to milliseconds and written back.

/** `<h>h<m>m<s>s`, each part optional but at least one, in that order: `90s`, `15m`, `1h30m`. */
export const DURATION_PATTERN = /^(?=\d)(?:(\d{1,4})h)?(?:(\d{1,6})m)?(?:(\d{1,7})s)?$/;

/** Milliseconds of a duration such as `20s`, `15m` or `1h30m`; undefined when it is not one. */
export function parseDuration(text: string): number | undefined {
  const match = DURATION_PATTERN.exec(text.trim());
  if (!match) return undefined;
  const [, hours, minutes, seconds] = match;
  return ((Number(hours ?? 0) * 60 + Number(minutes ?? 0)) * 60 + Number(seconds ?? 0)) * 1000;
}

/** A duration in ms as the shortest text {@link parseDuration} reads back: `20s`, `15m`, `1h30m`. */
export function formatDuration(ms: number): string {
  const total = Math.round(ms / 1000);
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const seconds = total % 60;
  const text = `${hours ? `${hours}h` : ""}${minutes ? `${minutes}m` : ""}${seconds ? `${seconds}s` : ""}`;
  return text || "0s";
}
