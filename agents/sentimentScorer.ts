import { z } from "zod";
import { defineCapability } from "../src/agent/tools/capability.ts";
import { words } from "./words.ts";

/**
 * Valence of English words from -3 (very negative) to +3 (very positive), written for Tollgate's
 * demo texts and everyday reviews. Inflected forms are listed explicitly rather than stemmed so that
 * a score is easy to trace back to a word.
 */
const LEXICON_TEXT = `
+3 excellent outstanding superb wonderful fantastic brilliant delightful perfect amazing marvellous marvelous thrilled love loved loves exceptional magnificent
+2 good great nice pleasant happy glad cheerful lively proud best better enjoy enjoyed enjoys enjoyable praise praised praises recommend recommended beautiful lovely fair friendly helpful reliable fast easy improved improvement success successful win won winning grateful thankful kind generous clean fresh safe welcoming impressive efficient smooth comfortable fun charming solid valuable useful
+1 fine ok okay calm decent adequate reasonable satisfied interesting positive growing grown grew hope hopeful gain gains repaired fixed open stable popular modern quick convenient agree
-1 slow late cold odd boring minor concern concerns complain complaint complaints confusing delay delayed delays problem problems issue issues wrong mistake doubt doubts tired limited expensive crowded overcrowded noisy difficult hard unclear negative miss missed cancel
-2 bad poor angry unhappy sad worse broken fail failed failure fails useless rude dirty dangerous unsafe disappointing disappointed disappoint frustrating frustrated annoying annoyed unreliable cancelled canceled shortage lost lose losing hate hated ugly painful dislike complained refused stolen sick mess chaos
-3 terrible awful horrible disaster disastrous worst dreadful appalling furious disgusting atrocious catastrophic hopeless nightmare
`;

const lexicon: ReadonlyMap<string, number> = new Map(
  LEXICON_TEXT.trim()
    .split("\n")
    .flatMap((line) => {
      const [value, ...entries] = line.trim().split(/\s+/);
      return entries.map((word) => [word, Number(value)] as const);
    }),
);

/** Words that flip the valence of the next few words. */
const NEGATORS = new Set([
  "not",
  "no",
  "never",
  "none",
  "nobody",
  "nothing",
  "neither",
  "nor",
  "without",
  "cannot",
  "hardly",
  "barely",
  "scarcely",
]);

/** Multipliers for the next sentiment word. */
const INTENSIFIERS: ReadonlyMap<string, number> = new Map([
  ["very", 1.5],
  ["really", 1.5],
  ["extremely", 1.8],
  ["incredibly", 1.8],
  ["truly", 1.4],
  ["so", 1.3],
  ["too", 1.3],
  ["highly", 1.5],
  ["quite", 1.2],
  ["totally", 1.5],
  ["slightly", 0.5],
  ["somewhat", 0.6],
  ["fairly", 0.8],
  ["mildly", 0.5],
]);

/** How many words after a negator it still applies to (stopped early by punctuation). */
const NEGATION_SCOPE = 3;
/** A negated word keeps half its strength with the opposite sign: "not good" is milder than "bad". */
const NEGATION_FACTOR = -0.5;
/** "x, but y": the clause after "but" carries the speaker's verdict. */
const BEFORE_BUT = 0.5;
const AFTER_BUT = 1.5;
/** Squashes a raw sum into (-1, 1): x / sqrt(x² + SQUASH). */
const SQUASH = 12;
/** Scores within ±NEUTRAL_BAND are neutral. */
const NEUTRAL_BAND = 0.2;

export const SentimentInputSchema = z.object({
  text: z.string().min(1).max(100_000).describe("English text to score."),
});
export type SentimentInput = z.infer<typeof SentimentInputSchema>;

export const SentimentLabelSchema = z.enum(["positive", "neutral", "negative"]);

export const SentimentOutputSchema = z.object({
  score: z.number().min(-1).max(1),
  label: SentimentLabelSchema,
  matches: z.array(z.object({ word: z.string(), value: z.number(), negated: z.boolean() })),
});
export type SentimentOutput = z.infer<typeof SentimentOutputSchema>;

function isNegator(word: string): boolean {
  return NEGATORS.has(word) || word.endsWith("n't");
}

/**
 * Lexicon sentiment of English text: each lexicon word adds its valence, scaled by a preceding
 * intensifier and flipped (at half strength) within three words after a negator in the same clause;
 * clauses before "but" count half and after it one and a half. The sum is squashed into [-1, 1];
 * the label is neutral within ±0.2.
 */
export function scoreSentiment(text: string): SentimentOutput {
  const matches: SentimentOutput["matches"] = [];
  let total = 0;
  for (const sentence of text.normalize("NFC").split(/[.!?;\n]+/)) {
    const clauses = sentence.split(/\bbut\b/i);
    clauses.forEach((clause, clauseIndex) => {
      const weight = clauses.length === 1 ? 1 : clauseIndex === clauses.length - 1 ? AFTER_BUT : BEFORE_BUT;
      let negationLeft = 0;
      let intensity = 1;
      for (const part of clause.split(/,/)) {
        negationLeft = 0;
        for (const word of words(part)) {
          if (isNegator(word)) {
            negationLeft = NEGATION_SCOPE;
            continue;
          }
          const boost = INTENSIFIERS.get(word);
          if (boost !== undefined) {
            intensity *= boost;
            continue;
          }
          const value = lexicon.get(word);
          const negated = negationLeft > 0;
          if (negationLeft > 0) negationLeft -= 1;
          if (value === undefined) {
            intensity = 1;
            continue;
          }
          const contribution = value * intensity * (negated ? NEGATION_FACTOR : 1) * weight;
          total += contribution;
          matches.push({ word, value: round(contribution), negated });
          intensity = 1;
        }
      }
    });
  }
  const score = round(total / Math.sqrt(total * total + SQUASH));
  const label = score > NEUTRAL_BAND ? "positive" : score < -NEUTRAL_BAND ? "negative" : "neutral";
  return { score, label, matches };
}

function round(value: number): number {
  // Avoid "-0" in JSON output.
  return Math.round(value * 1000) / 1000 + 0;
}

/** Characters per metered unit: one unit per started thousand characters. */
export const SENTIMENT_UNIT_CHARS = 1000;

/** The sentiment capability: metered under a monthly plan (100 units included, then 0.001 USDC a unit). */
export const sentimentScorer = defineCapability({
  name: "sentiment",
  description:
    "Sentiment of English text: the mood or tone as a score from -1 (negative) to 1 (positive) with a " +
    "label, from a word lexicon with negation handling. Metered: one unit per started 1000 characters.",
  input: SentimentInputSchema,
  output: SentimentOutputSchema,
  pricing: [
    {
      type: "subscription",
      plan: { price: "1", interval: 2_592_000, includedUnits: 100, overageUnitPrice: "0.001" },
    },
  ],
  units: ({ text }) => Math.max(1, Math.ceil(text.length / SENTIMENT_UNIT_CHARS)),
  handler: async ({ text }) => scoreSentiment(text),
});
