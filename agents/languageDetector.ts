import { z } from "zod";
import { defineCapability } from "../src/agent/tools/capability.ts";
import { type LanguageCode, languageSamples } from "./languageSamples.ts";

/** Character trigrams of text: lower-cased letters, each word padded with one space on both sides. */
export function trigrams(text: string): string[] {
  const grams: string[] = [];
  const letters =
    text
      .normalize("NFC")
      .toLowerCase()
      .match(/\p{L}+/gu) ?? [];
  for (const word of letters) {
    const padded = ` ${word} `;
    for (let i = 0; i + 3 <= padded.length; i++) grams.push(padded.slice(i, i + 3));
  }
  return grams;
}

type Profile = { code: LanguageCode; name: string; counts: Map<string, number>; total: number };

/** Trigram counts per language, built once from the samples. */
function buildProfiles(): Profile[] {
  return (Object.keys(languageSamples) as LanguageCode[]).map((code) => {
    const counts = new Map<string, number>();
    const grams = trigrams(languageSamples[code].text);
    for (const gram of grams) counts.set(gram, (counts.get(gram) ?? 0) + 1);
    return { code, name: languageSamples[code].name, counts, total: grams.length };
  });
}

const profiles = buildProfiles();
/** Distinct trigrams over every profile: the smoothing vocabulary. */
const vocabulary = new Set(profiles.flatMap((profile) => [...profile.counts.keys()])).size;

/** Below this many trigrams a guess is reported but marked unreliable. */
const MIN_RELIABLE_TRIGRAMS = 20;
/** A reliable guess also needs this posterior probability. */
const MIN_RELIABLE_CONFIDENCE = 0.9;

export const LanguageCodeSchema = z.enum(Object.keys(languageSamples) as [LanguageCode, ...LanguageCode[]]);

export const DetectLanguageInputSchema = z.object({
  text: z.string().min(1).max(100_000).describe("The text whose language to detect."),
});

export const DetectLanguageOutputSchema = z.object({
  /** ISO 639-1 code of the most likely language, or "und" when the text has no letters. */
  language: z.union([LanguageCodeSchema, z.literal("und")]),
  name: z.string(),
  /** Posterior probability of `language` under the trigram model with equal priors. */
  confidence: z.number().min(0).max(1),
  reliable: z.boolean(),
  /** Every known language, most likely first. */
  ranking: z.array(z.object({ language: LanguageCodeSchema, probability: z.number().min(0).max(1) })),
});
export type DetectLanguageOutput = z.infer<typeof DetectLanguageOutputSchema>;

/**
 * Naive Bayes over character trigrams: each language's log-likelihood of the text's trigrams with
 * add-one smoothing over the shared vocabulary, turned into posterior probabilities with equal priors.
 * Very sure on a paragraph, honest about a word: short texts are marked `reliable: false`.
 */
export function detectLanguage(text: string): DetectLanguageOutput {
  const grams = trigrams(text);
  if (grams.length === 0) {
    return { language: "und", name: "Undetermined", confidence: 0, reliable: false, ranking: [] };
  }
  const logLikelihoods = profiles.map((profile) => {
    const denominator = Math.log(profile.total + vocabulary);
    let sum = 0;
    for (const gram of grams) sum += Math.log((profile.counts.get(gram) ?? 0) + 1) - denominator;
    return sum;
  });
  const best = Math.max(...logLikelihoods);
  const weights = logLikelihoods.map((value) => Math.exp(value - best));
  const norm = weights.reduce((a, b) => a + b, 0);
  const ranking = profiles
    .map((profile, index) => ({ language: profile.code, probability: (weights[index] ?? 0) / norm }))
    .sort((a, b) => b.probability - a.probability || a.language.localeCompare(b.language))
    .map((entry) => ({ ...entry, probability: Math.round(entry.probability * 1e4) / 1e4 }));
  const top = ranking[0]!;
  const profile = profiles.find((candidate) => candidate.code === top.language)!;
  return {
    language: top.language,
    name: profile.name,
    confidence: top.probability,
    reliable: grams.length >= MIN_RELIABLE_TRIGRAMS && top.probability >= MIN_RELIABLE_CONFIDENCE,
    ranking,
  };
}

/** The language detector capability: pay once per call, 0.005 USDC. */
export const languageDetector = defineCapability({
  name: "detect-language",
  description:
    "Detect the language of a text (English, German, French, Spanish, Italian, Dutch, Portuguese) " +
    "from character trigram profiles; returns the ISO 639-1 code with a confidence.",
  input: DetectLanguageInputSchema,
  output: DetectLanguageOutputSchema,
  pricing: [{ type: "one-time", price: "0.005" }],
  handler: async ({ text }) => detectLanguage(text),
});
