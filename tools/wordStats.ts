import { z } from "zod";
import { defineCapability } from "../src/agent/tools/capability.ts";

export const WordStatsOutputSchema = z.object({
  words: z.int().nonnegative(),
  sentences: z.int().nonnegative(),
  characters: z.int().nonnegative(),
  /** Letters per word, two decimals. */
  averageWordLength: z.number().nonnegative(),
  /** The five most frequent words of four letters or more, most frequent first (ties alphabetical). */
  topWords: z.array(z.object({ word: z.string(), count: z.int().positive() })),
});

/** A local tool: counts of words and sentences and the most frequent words of a text. */
export const wordStats = defineCapability({
  name: "word-stats",
  description: "Count the words and sentences of a text and list its most frequent words.",
  input: z.object({ text: z.string().min(1).max(1_000_000).describe("The text to count.") }),
  output: WordStatsOutputSchema,
  pricing: [{ type: "one-time", price: "0.001" }],
  handler: async ({ text }) => {
    const words =
      text
        .normalize("NFC")
        .toLowerCase()
        .match(/\p{L}+(?:['’]\p{L}+)*/gu) ?? [];
    const counts = new Map<string, number>();
    for (const word of words) if (word.length >= 4) counts.set(word, (counts.get(word) ?? 0) + 1);
    const letters = words.reduce((sum, word) => sum + word.length, 0);
    return {
      words: words.length,
      sentences: (text.match(/[^.!?…]*\p{L}[^.!?…]*[.!?…]+|[^.!?…]*\p{L}[^.!?…]*$/gu) ?? []).length,
      characters: [...text].length,
      averageWordLength: words.length === 0 ? 0 : Math.round((letters / words.length) * 100) / 100,
      topWords: [...counts.entries()]
        .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
        .slice(0, 5)
        .map(([word, count]) => ({ word, count })),
    };
  },
});
