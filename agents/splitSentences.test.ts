import { describe, expect, it } from "vitest";
import { splitSentences } from "./splitSentences.ts";

describe("splitSentences", () => {
  it("splits at end punctuation followed by a capital", () => {
    expect(splitSentences("It rained. Then it stopped! Did it? Yes.")).toEqual([
      "It rained.",
      "Then it stopped!",
      "Did it?",
      "Yes.",
    ]);
  });

  it("does not split after an abbreviation or an initial", () => {
    expect(splitSentences("Dr. Smith met J. R. Jones. They talked.")).toEqual([
      "Dr. Smith met J. R. Jones.",
      "They talked.",
    ]);
  });

  it("keeps a lower-case continuation and decimals inside one sentence", () => {
    expect(splitSentences("The price rose 2.5 percent. e.g. in May it fell.")).toEqual([
      "The price rose 2.5 percent. e.g. in May it fell.",
    ]);
  });

  it("treats a blank line as a boundary and handles Spanish opening marks", () => {
    expect(splitSentences("Title line\n\nHola. ¿Qué tal? Bien")).toEqual([
      "Title line",
      "Hola.",
      "¿Qué tal?",
      "Bien",
    ]);
  });
});
