import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { loadDocuments } from "./loadDocuments.ts";
import { scoreSentiment, sentimentScorer } from "./sentimentScorer.ts";

describe("scoreSentiment", () => {
  it("labels clearly positive and negative text", () => {
    expect(scoreSentiment("The staff were friendly and the food was excellent.").label).toBe("positive");
    expect(scoreSentiment("The service was terrible and the room was dirty.").label).toBe("negative");
  });

  it("flips a negated word: 'not good' is negative, 'not bad' is positive", () => {
    const notGood = scoreSentiment("The food was not good.");
    expect(notGood.label).toBe("negative");
    expect(notGood.matches).toEqual([{ word: "good", value: -1, negated: true }]);
    expect(scoreSentiment("The food was not bad.").label).toBe("positive");
    expect(scoreSentiment("I don't love it.").score).toBeLessThan(0);
  });

  it("makes a negated word weaker than its plain opposite", () => {
    expect(scoreSentiment("It was not good.").score).toBeGreaterThan(scoreSentiment("It was bad.").score);
  });

  it("ends negation at a comma and after three words", () => {
    const comma = scoreSentiment("There was no wait, and the staff were friendly.");
    expect(comma.matches).toEqual([{ word: "friendly", value: 2, negated: false }]);
    const far = scoreSentiment("Never in all those years was it good.");
    expect(far.matches[0]).toEqual({ word: "good", value: 2, negated: false });
  });

  it("strengthens a word after an intensifier and weakens it after a diminisher", () => {
    const plain = scoreSentiment("It was good.").score;
    expect(scoreSentiment("It was very good.").score).toBeGreaterThan(plain);
    expect(scoreSentiment("It was slightly good.").score).toBeLessThan(plain);
  });

  it("lets the clause after 'but' decide", () => {
    expect(scoreSentiment("The room was dirty, but the staff were wonderful.").label).toBe("positive");
    expect(scoreSentiment("The staff were wonderful, but the room was dirty.").label).toBe("negative");
  });

  it("is neutral with score 0 when no lexicon word occurs", () => {
    expect(scoreSentiment("The canal runs for forty miles.")).toEqual({
      score: 0,
      label: "neutral",
      matches: [],
    });
  });

  it("keeps every score in [-1, 1] with a label that agrees with its sign", () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom("good", "bad", "not", "very", "but", "terrible", ",", "the", "."), {
          maxLength: 60,
        }),
        (tokens) => {
          const { score, label } = scoreSentiment(tokens.join(" "));
          expect(score).toBeGreaterThanOrEqual(-1);
          expect(score).toBeLessThanOrEqual(1);
          if (label === "positive") expect(score).toBeGreaterThan(0);
          if (label === "negative") expect(score).toBeLessThan(0);
        },
      ),
    );
  });

  it("reads the moods of the bundled English documents", async () => {
    const documents = new Map((await loadDocuments()).map((document) => [document.id, document.text]));
    expect(scoreSentiment(documents.get("en-harbour-market")!).label).toBe("positive");
    expect(scoreSentiment(documents.get("en-rail-delays")!).label).toBe("negative");
    expect(scoreSentiment(documents.get("en-canal-history")!).label).toBe("neutral");
  });
});

describe("sentimentScorer capability", () => {
  it("meters one unit per started thousand characters under a plan with included units", () => {
    expect(sentimentScorer.units?.({ text: "short" })).toBe(1);
    expect(sentimentScorer.units?.({ text: "x".repeat(1000) })).toBe(1);
    expect(sentimentScorer.units?.({ text: "x".repeat(2001) })).toBe(3);
    expect(sentimentScorer.pricing).toEqual([
      {
        type: "subscription",
        plan: { price: "1", interval: 2_592_000, includedUnits: 100, overageUnitPrice: "0.001" },
      },
    ]);
  });
});
