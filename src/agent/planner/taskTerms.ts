/**
 * Content terms of task texts and tool descriptions, and when two terms are "the same word" for the
 * rule planner: equal after light normalization, or sharing a prefix of at least five letters
 * ("summarize" ~ "summary", "notarize" ~ "notary", "detect" ~ "detection").
 */

/** Words that say nothing about which tool to use. */
const NOISE = new Set(
  (
    "a about above after again all also am an and any are as at be because been before being below " +
    "between both but by can could did do does doing done down during each either else every few for " +
    "from further had has have having he her here hers him his how i if in into is it its itself just " +
    "like me more most my no nor not now of off on once only or other our ours out over own per please " +
    "same she should so some such than that the their theirs them then there these they this those " +
    "through to too under until up us very was we were what when where which while who whom why will " +
    "with would you your yours give tell show get make find run use using let want need help return " +
    "returns returned result results given tool tools input inputs output outputs document documents doc " +
    "docs text texts individually respective one two three four five six seven eight nine ten works " +
    "any way thing things"
  ).split(" "),
);

/** Minimum shared prefix for two different words to match. */
const PREFIX = 5;

/** Lower case, possessive and plural endings removed: "documents" → "document", "stories" → "story". */
export function normalizeTerm(word: string): string {
  let term = word.toLowerCase().replace(/['’]s$/, "");
  if (term.length > 4 && term.endsWith("ies")) term = `${term.slice(0, -3)}y`;
  else if (term.length > 3 && term.endsWith("s") && !/(ss|us|is)$/.test(term)) term = term.slice(0, -1);
  return term;
}

/** Whether two normalized terms are the same word for tool matching. */
export function termsMatch(a: string, b: string): boolean {
  if (a === b) return true;
  if (a.length < PREFIX || b.length < PREFIX) return false;
  return a.slice(0, PREFIX) === b.slice(0, PREFIX);
}

/** The content terms of a text, in order of first appearance, each once. */
export function contentTerms(text: string): string[] {
  const seen = new Set<string>();
  for (const word of text.normalize("NFC").match(/\p{L}+(?:['’]\p{L}+)*/gu) ?? []) {
    const term = normalizeTerm(word);
    if (term.length < 2 || NOISE.has(term) || NOISE.has(word.toLowerCase())) continue;
    seen.add(term);
  }
  return [...seen];
}

/** The terms of a tool name: split at `-`, `_` and lower-to-upper case changes. */
export function nameTerms(name: string): string[] {
  return contentTerms(name.replace(/([a-z])([A-Z])/g, "$1 $2").replace(/[-_]+/g, " "));
}
