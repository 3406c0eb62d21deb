// Quoting one word for a POSIX shell: the one quoting rule every package uses when it builds a
// command line for the guest's shell or a host script.

const PLAIN = /^[A-Za-z0-9_./:=@%+,-]+$/;

/**
 * One word as a POSIX shell reads it back unchanged: a plain word (letters, digits and
 * `_./:=@%+,-`) as it is, anything else (the empty word too) in single quotes.
 */
export function shellQuote(word: string): string {
  if (PLAIN.test(word)) return word;
  return `'${word.replace(/'/g, "'\\''")}'`;
}
