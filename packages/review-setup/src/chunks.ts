/** Default size of one transfer part: base64 text well under the controller's 1 MiB write cap. */
export const DEFAULT_CHUNK_CHARS = 700 * 1024;

/**
 * Encodes bytes as base64 and cuts the text into parts of at most `chunkChars` characters (a
 * multiple of 4). Concatenating the parts in order and decoding gives the bytes back.
 */
export function base64Chunks(bytes: Uint8Array, chunkChars = DEFAULT_CHUNK_CHARS): string[] {
  if (!Number.isInteger(chunkChars) || chunkChars < 4) throw new RangeError("chunkChars must be an integer >= 4");
  const size = chunkChars - (chunkChars % 4);
  const text = Buffer.from(bytes).toString("base64");
  const parts: string[] = [];
  for (let at = 0; at < text.length; at += size) parts.push(text.slice(at, at + size));
  return parts;
}

/** Name of transfer part `index`: zero-padded so a shell glob lists parts in order. */
export function partName(index: number): string {
  return `part-${String(index).padStart(6, "0")}`;
}
