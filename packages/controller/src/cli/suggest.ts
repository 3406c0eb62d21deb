// "did you mean …" for a mistyped command or flag: the known words within a small edit distance
// (a swap of two neighbouring letters counts as one edit), or that the typed word begins.

/** Edits (insert, delete, replace, swap of neighbours) that turn `a` into `b`. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
      }
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The known words closest to `typed`, best first: within 1 edit for words of up to 4 letters, 2
 * otherwise, or starting with `typed` (at least 2 letters); at most three.
 */
export function suggestions(typed: string, known: readonly string[]): string[] {
  const bare = (word: string) => word.replace(/^-+/, "");
  const word = bare(typed);
  const scored = [...new Set(known)]
    .map((candidate) => {
      const distance = editDistance(word, bare(candidate));
      const close = distance <= (word.length <= 4 ? 1 : 2) && distance < bare(candidate).length;
      const prefix = word.length >= 2 && bare(candidate).startsWith(word);
      return { candidate, score: close ? distance : prefix ? 2.5 : Infinity };
    })
    .filter((s) => s.score !== Infinity && s.candidate !== typed)
    .sort((x, y) => x.score - y.score || x.candidate.localeCompare(y.candidate));
  return scored.slice(0, 3).map((s) => s.candidate);
}

/** `; did you mean exec?` (or `exec or exec-kill?`), or empty when nothing is close. */
export function didYouMean(typed: string, known: readonly string[]): string {
  const found = suggestions(typed, known);
  if (found.length === 0) return "";
  return `; did you mean ${found.length === 1 ? found[0] : `${found.slice(0, -1).join(", ")} or ${found.at(-1)}`}?`;
}
