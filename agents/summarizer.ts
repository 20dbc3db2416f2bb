import { z } from "zod";
import { defineCapability } from "../src/agent/tools/capability.ts";
import { splitSentences } from "./splitSentences.ts";
import { stopwords } from "./stopwords.ts";
import { words } from "./words.ts";

export const SummarizeInputSchema = z.object({
  text: z.string().min(1).max(100_000).describe("The text to summarize."),
  sentences: z.int().min(1).max(20).optional().describe("How many sentences to keep (default 3)."),
});
export type SummarizeInput = z.infer<typeof SummarizeInputSchema>;

export const SummarizeOutputSchema = z.object({
  summary: z.string(),
  sentences: z.array(z.object({ index: z.int().nonnegative(), text: z.string(), score: z.number() })),
  totalSentences: z.int().nonnegative(),
});
export type SummarizeOutput = z.infer<typeof SummarizeOutputSchema>;

const DEFAULT_SENTENCES = 3;

/**
 * Extractive summary: each sentence scores the sum of its content words' frequencies (normalized by
 * the most frequent content word), divided by the square root of its content-word count so that long
 * sentences do not win by length alone. The top `count` sentences are returned in their original order;
 * equal scores go to the earlier sentence. Function words of the known languages are not counted.
 */
export function summarizeText(text: string, count: number = DEFAULT_SENTENCES): SummarizeOutput {
  const sentences = splitSentences(text);
  const contentWords = sentences.map((sentence) => words(sentence).filter((word) => !stopwords.has(word)));
  const frequency = new Map<string, number>();
  for (const list of contentWords) {
    for (const word of list) frequency.set(word, (frequency.get(word) ?? 0) + 1);
  }
  const highest = Math.max(1, ...frequency.values());
  const scored = sentences.map((sentence, index) => {
    const list = contentWords[index] ?? [];
    const sum = list.reduce((total, word) => total + (frequency.get(word) ?? 0) / highest, 0);
    const score = list.length === 0 ? 0 : sum / Math.sqrt(list.length);
    return { index, text: sentence, score: Math.round(score * 1e4) / 1e4 };
  });
  const chosen = [...scored]
    .sort((a, b) => b.score - a.score || a.index - b.index)
    .slice(0, count)
    .sort((a, b) => a.index - b.index);
  return {
    summary: chosen.map((sentence) => sentence.text).join(" "),
    sentences: chosen,
    totalSentences: sentences.length,
  };
}

/** The summarizer capability: pay once per call, 0.02 USDC. */
export const summarizer = defineCapability({
  name: "summarize",
  description:
    "Summarize a text: an extractive summary that keeps its most representative sentences (by term " +
    "frequency) in their original order. Works offline for any language.",
  input: SummarizeInputSchema,
  output: SummarizeOutputSchema,
  pricing: [{ type: "one-time", price: "0.02" }],
  handler: async ({ text, sentences }) => summarizeText(text, sentences ?? DEFAULT_SENTENCES),
});
