import { describe, expect, it } from "vitest";
import { detectLanguage, languageDetector } from "./languageDetector.ts";
import { loadDocuments } from "./loadDocuments.ts";
import { splitSentences } from "./splitSentences.ts";

describe("detectLanguage", () => {
  it("detects the language of every bundled document, reliably", async () => {
    const documents = await loadDocuments();
    expect(new Set(documents.map((document) => document.id.slice(0, 2)))).toEqual(
      new Set(["en", "de", "fr", "es", "it", "nl", "pt"]),
    );
    for (const document of documents) {
      const result = detectLanguage(document.text);
      expect({ id: document.id, language: result.language, reliable: result.reliable }).toEqual({
        id: document.id,
        language: document.id.slice(0, 2),
        reliable: true,
      });
    }
  });

  it("detects each single sentence of the bundled documents", async () => {
    for (const document of await loadDocuments()) {
      for (const sentence of splitSentences(document.text)) {
        expect({ sentence, language: detectLanguage(sentence).language }).toEqual({
          sentence,
          language: document.id.slice(0, 2),
        });
      }
    }
  });

  it("tells close languages apart on short greetings", () => {
    expect(detectLanguage("Buenos días, ¿cómo estás hoy?").language).toBe("es");
    expect(detectLanguage("Bom dia, como estás hoje?").language).toBe("pt");
    expect(detectLanguage("Buongiorno, come stai oggi?").language).toBe("it");
    expect(detectLanguage("Goedemorgen, hoe gaat het vandaag met je?").language).toBe("nl");
    expect(detectLanguage("Guten Morgen, wie geht es dir heute?").language).toBe("de");
  });

  it("marks a single word as unreliable and text without letters as undetermined", () => {
    expect(detectLanguage("hotel").reliable).toBe(false);
    expect(detectLanguage("1234 !!! 56")).toEqual({
      language: "und",
      name: "Undetermined",
      confidence: 0,
      reliable: false,
      ranking: [],
    });
  });

  it("ranks all seven languages with probabilities summing to one", () => {
    const { ranking } = detectLanguage("Le chat dort sur la chaise près de la fenêtre.");
    expect(ranking).toHaveLength(7);
    expect(ranking[0]!.language).toBe("fr");
    expect(ranking.reduce((sum, entry) => sum + entry.probability, 0)).toBeCloseTo(1, 3);
  });

  it("is priced at 0.005 USDC per call", () => {
    expect(languageDetector.pricing).toEqual([{ type: "one-time", price: "0.005" }]);
  });
});
