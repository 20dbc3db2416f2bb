import { describe, expect, it } from "vitest";
import { isTollgateError } from "../src/protocol/errors.ts";
import { loadDocuments } from "./loadDocuments.ts";
import { loadLocalTools, main, runResearch } from "./research.ts";

describe("runResearch", () => {
  it("runs the default task over every bundled document with the rule planner, offline", async () => {
    const documents = await loadDocuments();
    const run = await runResearch();
    expect(run.planner).toBe("rules");
    expect(run.steps).toHaveLength(documents.length * 3);
    expect(run.steps.filter((step) => step.error !== undefined)).toEqual([]);
    for (const document of documents) {
      const language = run.steps.find(
        (step) => step.document === document.id && step.tool === "detect-language",
      );
      expect(JSON.parse(language!.result).language).toBe(document.id.slice(0, 2));
      const summary = run.steps.find((step) => step.document === document.id && step.tool === "summarize");
      expect(summary!.args).toEqual({ text: document.text, sentences: 2 });
    }
    const mood = (id: string) =>
      JSON.parse(run.steps.find((step) => step.document === id && step.tool === "sentiment")!.result).label;
    expect([mood("en-harbour-market"), mood("en-rail-delays")]).toEqual(["positive", "negative"]);
    expect(run.answer).toContain("Answer by the rule planner");
  });

  it("refuses to load a remote tool as a local one", async () => {
    const failure = await loadLocalTools(["summarize", "brief"]).catch((error: unknown) => error);
    expect(isTollgateError(failure, "InvalidRequest")).toBe(true);
  });
});

describe("research script", () => {
  it("prints progress, the answer and the planner, and exits 0 when every call succeeded", async () => {
    const lines: string[] = [];
    const code = await main({
      argv: ["Count", "the", "words", "of", "de-backstube"],
      env: {},
      print: (line) => lines.push(line),
    });
    expect(code).toBe(0);
    expect(lines[0]).toBe("  ok word-stats de-backstube");
    expect(lines.join("\n")).toContain(
      'Answer by the rule planner (deterministic, no language model) for: "Count the words of de-backstube"',
    );
    expect(lines.at(-1)).toMatch(/^planner: rules \(the deterministic rule planner; .*\) — 1 tool calls$/);
  });
});
