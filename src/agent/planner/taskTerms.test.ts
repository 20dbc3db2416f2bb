import { describe, expect, it } from "vitest";
import { contentTerms, nameTerms, normalizeTerm, termsMatch } from "./taskTerms.ts";

describe("task terms", () => {
  it("drops plural and possessive endings but not double s", () => {
    expect(["documents", "stories", "class", "status", "city's"].map(normalizeTerm)).toEqual([
      "document",
      "story",
      "class",
      "status",
      "city",
    ]);
  });

  it("matches words sharing a five-letter prefix, and short words only exactly", () => {
    expect(termsMatch("summarize", "summary")).toBe(true);
    expect(termsMatch("notarize", "notary")).toBe(true);
    expect(termsMatch("sentiment", "sentence")).toBe(false);
    expect(termsMatch("mood", "moody")).toBe(false);
    expect(termsMatch("mood", "mood")).toBe(true);
  });

  it("keeps content words once, in order, without filler", () => {
    expect(contentTerms("Please summarize each document and summarize the mood of the texts")).toEqual([
      "summarize",
      "mood",
    ]);
  });

  it("splits tool names at dashes, underscores and case changes", () => {
    expect(nameTerms("detect-language")).toEqual(["detect", "language"]);
    expect(nameTerms("word_stats")).toEqual(["word", "stat"]);
    expect(nameTerms("priceQuote")).toEqual(["price", "quote"]);
  });
});
