import { tool } from "@langchain/core/tools";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createRulePlanner } from "./createRulePlanner.ts";

const noop = async () => "{}";
const summarize = tool(noop, {
  name: "summarize",
  description: "Summarize a text: keeps its most representative sentences.",
  schema: z.object({ text: z.string(), sentences: z.int().optional() }),
});
const sentiment = tool(noop, {
  name: "sentiment",
  description: "Sentiment of English text: mood or tone from negative to positive.",
  schema: z.object({ text: z.string() }),
});
const detectLanguage = tool(noop, {
  name: "detect-language",
  description: "Detect which language a text is written in.",
  schema: z.object({ text: z.string() }),
});
const brief = tool(noop, {
  name: "brief",
  description: "A summary plus the overall mood (positive, neutral or negative), resold.",
  schema: z.object({ text: z.string() }),
});
const weather = tool(noop, {
  name: "weather",
  description: "Weather forecast for a city.",
  schema: z.object({ city: z.string(), days: z.int().optional() }),
});
const tools = [summarize, sentiment, detectLanguage, brief, weather];

const documents = [
  { id: "en-a", title: "Harbour Market", text: "The market is lovely." },
  { id: "de-b", title: "Backstube", text: "Das Brot ist frisch." },
  { id: "fr-c", text: "Le jardin est beau." },
];

describe("createRulePlanner", () => {
  const planner = createRulePlanner();

  it("chooses tools by name and description and runs them in the order the task names them", () => {
    const plan = planner.plan("Detect the language of each document, then summarize it", tools, {
      documents,
    });
    expect(plan.planner).toBe("rules");
    expect(plan.chosen).toEqual([
      { tool: "detect-language", matched: ["detect", "language"] },
      { tool: "summarize", matched: ["summarize"] },
    ]);
    expect(plan.calls.map((call) => `${call.document}:${call.tool}`)).toEqual([
      "en-a:detect-language",
      "en-a:summarize",
      "de-b:detect-language",
      "de-b:summarize",
      "fr-c:detect-language",
      "fr-c:summarize",
    ]);
  });

  it("matches a description word such as 'mood' and prefers the specialist to a reseller of chosen tools", () => {
    expect(planner.plan("What is the mood of each document?", tools, { documents }).chosen).toEqual([
      { tool: "sentiment", matched: ["mood"] },
    ]);
    const plan = planner.plan("Summarize each document and say how positive it is", tools, { documents });
    expect(plan.chosen.map((choice) => choice.tool)).toEqual(["summarize", "sentiment"]);
    expect(planner.plan("A brief of each document", tools, { documents }).chosen.map((c) => c.tool)).toEqual([
      "brief",
    ]);
  });

  it("fills the text argument per document and a number the task puts before a parameter's name", () => {
    const plan = planner.plan("Summarize every document in 2 sentences", tools, { documents });
    expect(plan.calls).toEqual([
      { tool: "summarize", args: { text: "The market is lovely.", sentences: 2 }, document: "en-a" },
      { tool: "summarize", args: { text: "Das Brot ist frisch.", sentences: 2 }, document: "de-b" },
      { tool: "summarize", args: { text: "Le jardin est beau.", sentences: 2 }, document: "fr-c" },
    ]);
    expect(
      planner.plan("Summarize each document in three sentences", tools, { documents }).calls[0]?.args,
    ).toEqual({
      text: "The market is lovely.",
      sentences: 3,
    });
  });

  it("joins the documents into one text when the task does not ask for each", () => {
    const plan = planner.plan("Summarize the documents", tools, { documents });
    expect(plan.calls).toEqual([
      {
        tool: "summarize",
        args: {
          text: "Harbour Market\nThe market is lovely.\n\nBackstube\nDas Brot ist frisch.\n\nLe jardin est beau.",
        },
        document: undefined,
      },
    ]);
  });

  it("works only on the documents the task names by id or title", () => {
    expect(planner.plan("Summarize de-b", tools, { documents }).calls.map((call) => call.document)).toEqual([
      "de-b",
    ]);
    const plan = planner.plan("Summarize each of Harbour Market and fr-c", tools, { documents });
    expect(plan.calls.map((call) => call.document)).toEqual(["en-a", "fr-c"]);
  });

  it("works on quoted text, else on the input text", () => {
    expect(planner.plan('Detect the language of "Bom dia a todos"', tools, { documents }).calls).toEqual([
      { tool: "detect-language", args: { text: "Bom dia a todos" }, document: undefined },
    ]);
    expect(planner.plan("Detect the language", tools, { text: "Hallo Welt" }).calls[0]?.args).toEqual({
      text: "Hallo Welt",
    });
  });

  it("fills arguments from inputs of the same name and calls a tool without a text parameter once", () => {
    const plan = planner.plan("Weather forecast for 3 days", tools, { city: "Porto", documents });
    expect(plan.calls).toEqual([{ tool: "weather", args: { city: "Porto", days: 3 } }]);
  });

  it("skips a chosen tool whose required argument nothing provides, and says why", () => {
    const plan = planner.plan("What is the weather?", tools, {});
    expect(plan.calls).toEqual([]);
    expect(plan.skipped).toEqual([{ tool: "weather", reason: 'missing argument "city"' }]);
    expect(planner.plan("Summarize it", tools, {}).skipped).toEqual([
      { tool: "summarize", reason: "no text or documents to work on" },
    ]);
  });

  it("forecasts the calls per tool that the plan makes", () => {
    expect(planner.forecast("Summarize each document and detect its language", tools, { documents })).toEqual(
      {
        summarize: 3,
        "detect-language": 3,
      },
    );
    expect(planner.forecast("Bake a cake", tools, { documents })).toEqual({});
  });
});

describe("rule planner answers", () => {
  const planner = createRulePlanner();

  it("names the rule planner and lists each document's results by title", () => {
    const plan = planner.plan("Summarize and detect the language of each document", tools, {
      documents: documents.slice(0, 2),
    });
    const answer = planner.answer(plan, [
      {
        tool: "summarize",
        document: "en-a",
        result: JSON.stringify({ summary: "Lovely market.", totalSentences: 1 }),
      },
      {
        tool: "detect-language",
        document: "en-a",
        result: JSON.stringify({ language: "en", confidence: 1 }),
      },
      { tool: "summarize", document: "de-b", result: "plain text result" },
      { tool: "detect-language", document: "de-b", result: "", error: "BudgetExceeded: daily limit reached" },
    ]);
    expect(answer).toBe(
      [
        'Answer by the rule planner (deterministic, no language model) for: "Summarize and detect the language of each document"',
        "Tools: summarize (matched summarize); detect-language (matched detect, language).",
        "",
        "en-a — Harbour Market",
        "- summarize: summary: Lovely market.; totalSentences: 1",
        "- detect-language: language: en; confidence: 1",
        "",
        "de-b — Backstube",
        "- summarize: plain text result",
        "- detect-language: failed: BudgetExceeded: daily limit reached",
        "",
        "1 of 4 calls failed.",
      ].join("\n"),
    );
  });

  it("says so when no tool matches", () => {
    const plan = planner.plan("Bake a cake", tools, { documents });
    expect(planner.answer(plan, [])).toContain("No tool matches this task");
  });
});
