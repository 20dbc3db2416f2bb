/**
 * Sentence units for the offline capabilities: deterministic and locale-free (letters are Unicode
 * letters; text is NFC-normalized first).
 */

/** Lower-case abbreviations whose period does not end a sentence. */
const ABBREVIATIONS = new Set([
  "mr",
  "mrs",
  "ms",
  "dr",
  "prof",
  "st",
  "jr",
  "sr",
  "vs",
  "etc",
  "e.g",
  "i.e",
  "no",
  "fig",
  "approx",
  "z.b",
  "bzw",
  "usw",
  "sig",
  "sra",
]);

/**
 * Splits text into sentences: a sentence ends at `.`, `!`, `?` or `…` (with closing quotes or brackets)
 * followed by white space and an upper-case letter, digit or opening quote, or at a blank line. A period
 * after a known abbreviation or a single letter (an initial) does not end a sentence.
 * Returns trimmed, non-empty sentences in order.
 */
export function splitSentences(text: string): string[] {
  const sentences: string[] = [];
  for (const paragraph of text.normalize("NFC").split(/\n\s*\n/)) {
    const flat = paragraph.replace(/\s+/g, " ").trim();
    if (flat === "") continue;
    let start = 0;
    const boundary = /[.!?…]+["'”’»)\]]*\s+(?=["'“‘«([¿¡]?[\p{Lu}\p{N}])/gu;
    for (let match = boundary.exec(flat); match !== null; match = boundary.exec(flat)) {
      const end = match.index + match[0].trimEnd().length;
      const candidate = flat.slice(start, end);
      if (endsWithAbbreviation(candidate)) continue;
      sentences.push(candidate.trim());
      start = match.index + match[0].length;
    }
    const rest = flat.slice(start).trim();
    if (rest !== "") sentences.push(rest);
  }
  return sentences;
}

function endsWithAbbreviation(candidate: string): boolean {
  if (!candidate.endsWith(".")) return false;
  const last = /(\S+)\.$/u.exec(candidate)?.[1]?.toLowerCase() ?? "";
  const word = last.replace(/^["'“‘«([]+/u, "");
  return ABBREVIATIONS.has(word) || /^\p{L}$/u.test(word);
}
