import { describe, expect, it } from "vitest";
import { capabilityTool } from "../src/agent/tools/capabilityTool.ts";
import { isTollgateError } from "../src/protocol/errors.ts";
import { BriefOutputSchema, createBriefReseller } from "./createBriefReseller.ts";
import { loadDocuments } from "./loadDocuments.ts";
import { sentimentScorer } from "./sentimentScorer.ts";
import { summarizer, summarizeText } from "./summarizer.ts";

describe("createBriefReseller", () => {
  it("buys a summary, then the sentiment, and sells both as a brief", async () => {
    const bought: string[] = [];
    const summarizeTool = capabilityTool(summarizer);
    const sentimentTool = capabilityTool(sentimentScorer);
    const brief = createBriefReseller({
      summarize: async (input) => {
        bought.push(`summarize ${JSON.stringify(input.sentences)}`);
        return summarizeTool.invoke(input);
      },
      sentiment: async (input) => {
        bought.push("sentiment");
        return sentimentTool.invoke(input);
      },
    });
    const rail = (await loadDocuments()).find((document) => document.id === "en-rail-delays")!;
    const output = BriefOutputSchema.parse(await brief.handler({ text: rail.text }, {}));
    expect(bought).toEqual(["summarize 2", "sentiment"]);
    expect(output.summary).toBe(summarizeText(rail.text, 2).summary);
    expect(output.mood).toBe("negative");
    expect(output.sources).toEqual(["summarize", "sentiment"]);
    expect(brief.pricing).toEqual([{ type: "one-time", amount: "0.04" }]);
  });

  it("refuses a supplier's malformed result with InvalidRequest instead of reselling it", async () => {
    const brief = createBriefReseller({
      summarize: async () => ({ summary: "fine" }),
      sentiment: async () => "Error: PaymentRequired",
    });
    const failure = await brief.handler({ text: "Anything." }, {}).catch((error: unknown) => error);
    expect(isTollgateError(failure, "InvalidRequest")).toBe(true);
  });
});
