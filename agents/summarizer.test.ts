import { describe, expect, it } from "vitest";
import { capabilityTool } from "../src/agent/tools/capabilityTool.ts";
import { SummarizeOutputSchema, summarizer, summarizeText } from "./summarizer.ts";

const beeText = [
  "The village lies in a quiet valley.",
  "Bees make honey in the hive, and the hive keeps the honey safe.",
  "A bus stops there twice a week.",
  "Each hive holds thousands of bees that carry honey home.",
  "Nobody remembers who painted the church.",
].join(" ");

describe("summarizeText", () => {
  it("keeps the sentences built from the text's most frequent terms", () => {
    const result = summarizeText(beeText, 2);
    expect(result.sentences.map((sentence) => sentence.index)).toEqual([1, 3]);
    expect(result.summary).toBe(
      "Bees make honey in the hive, and the hive keeps the honey safe. Each hive holds thousands of bees that carry honey home.",
    );
    expect(result.totalSentences).toBe(5);
  });

  it("returns the chosen sentences in their original order, not by score", () => {
    const text = "Honey is sweet. The hive is full of honey, honey and more honey from the hive. Rain fell.";
    const result = summarizeText(text, 2);
    const [first, second] = result.sentences;
    expect(second!.score).toBeGreaterThan(first!.score);
    expect(result.sentences.map((sentence) => sentence.index)).toEqual([0, 1]);
  });

  it("gives a tie to the earlier sentence", () => {
    const result = summarizeText("Red apples grow. Green pears grow. Blue plums grow.", 1);
    expect(result.sentences.map((sentence) => sentence.index)).toEqual([0]);
  });

  it("returns every sentence when asked for more than the text has", () => {
    const result = summarizeText("One line only. And a second one.", 5);
    expect(result.sentences).toHaveLength(2);
    expect(result.summary).toBe("One line only. And a second one.");
  });

  it("ignores function words, so a sentence of them scores zero", () => {
    const result = summarizeText("It is what it is. Lighthouses guide ships past rocks.", 2);
    expect(result.sentences[0]!.score).toBe(0);
  });
});

describe("summarizer capability", () => {
  it("runs as a LangChain tool with a schema-valid output and 3 sentences by default", async () => {
    const summarize = capabilityTool(summarizer);
    const content = await summarize.invoke({ text: beeText });
    const output = SummarizeOutputSchema.parse(JSON.parse(String(content)));
    expect(output.sentences).toHaveLength(3);
    expect(summarizer.pricing).toEqual([{ type: "one-time", price: "0.02" }]);
  });

  it("rejects a call without text before the handler runs", async () => {
    const summarize = capabilityTool(summarizer);
    await expect(summarize.invoke({ sentences: 2 } as never)).rejects.toThrow(/expected schema/);
  });
});
