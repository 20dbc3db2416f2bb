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
    expect(brief.pricing).toEqual([{ type: "one-time", price: "0.08" }]);
  });

  it("refuses a supplier's malformed result with Internal (a 500 gives the buyer's proof back) instead of reselling it", async () => {
    let sentimentCalls = 0;
    const brief = createBriefReseller({
      summarize: async () => ({ summary: "fine" }),
      sentiment: async () => {
        sentimentCalls++;
        return "Error: PaymentRequired";
      },
    });
    const failure = await brief.handler({ text: "Anything." }, {}).catch((error: unknown) => error);
    expect(isTollgateError(failure, "Internal")).toBe(true);
    expect((failure as { status: number }).status).toBe(500);
    expect(sentimentCalls).toBe(2); // tried once more
  });

  it("spends one allowance per payment: a re-sent proof reuses what was bought and gets no new allowance", async () => {
    const seen: (bigint | undefined)[] = [];
    let summarizeCalls = 0;
    let sentimentUp = false;
    const brief = createBriefReseller({
      summarize: async (_input, allowance) => {
        summarizeCalls++;
        if (!allowance?.take(20_000n)) return "ERROR BudgetExceeded: no room";
        allowance.settle(20_000n, 20_000n);
        return JSON.stringify({ summary: "fine" });
      },
      sentiment: async (_input, allowance) => {
        seen.push(allowance?.remaining());
        if (!sentimentUp) return "ERROR HTTP500: the sentiment feed is down";
        return { score: 0.5, label: "positive" };
      },
    });
    const sale = { key: "payment:0xabc", earned: 40_000n };
    const first = await brief.handler({ text: "Anything." }, { sale }).catch((error: unknown) => error);
    expect(isTollgateError(first, "Internal")).toBe(true);
    expect((first as { details: Record<string, unknown> }).details).toMatchObject({
      supplier: "sentiment",
      code: "HTTP500",
      allowance: "40000",
      spent: "20000",
    });
    // The buyer's payer re-sends the same proof: the same sale, the summary is not bought again.
    sentimentUp = true;
    const output = await brief.handler({ text: "Anything." }, { sale });
    expect(output.mood).toBe("positive");
    expect(summarizeCalls).toBe(1);
    expect(seen).toEqual([20_000n, 20_000n, 20_000n]);
    // A new payment is a new sale with its own allowance.
    await brief
      .handler({ text: "Other." }, { sale: { key: "payment:0xdef", earned: 10_000n } })
      .catch(() => undefined);
    expect(summarizeCalls).toBe(2);
  });
});
