import { z } from "zod";
import { type Capability, defineCapability } from "../src/agent/tools/capability.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { parseWire } from "../src/protocol/parseWire.ts";

/**
 * Buys one call of another specialist's capability and returns its result as received. In production
 * this is a paid tool (the 402 is handled by the payer); in tests, a local handler.
 */
export type BuyFunction = (input: Record<string, unknown>) => Promise<unknown>;

export const BriefInputSchema = z.object({
  text: z.string().min(1).max(100_000).describe("The text to brief."),
  sentences: z.int().min(1).max(20).optional().describe("Sentences in the summary (default 2)."),
});

export const BriefOutputSchema = z.object({
  summary: z.string(),
  mood: z.enum(["positive", "neutral", "negative"]),
  score: z.number().min(-1).max(1),
  /** Which capabilities were bought, in order. */
  sources: z.array(z.string()),
});
export type BriefOutput = z.infer<typeof BriefOutputSchema>;

// What the reseller needs from the results it buys; they come from other sellers, so they are parsed.
const BoughtSummarySchema = z.object({ summary: z.string() });
const BoughtSentimentSchema = z.object({
  score: z.number().min(-1).max(1),
  label: z.enum(["positive", "neutral", "negative"]),
});

/**
 * A bought result may arrive as the JSON text of a tool's content or as the parsed value. A purchase
 * that failed comes back from a paid tool as `ERROR <code>: <message>`: that is the reseller's own
 * failure (it could not supply what it sells), reported with the supplier's code, never blamed on the
 * buyer's input.
 */
function decode(capability: string, result: unknown): unknown {
  if (typeof result !== "string") return result;
  const failed = /^ERROR ([A-Za-z][A-Za-z0-9]*): ?([\s\S]*)$/.exec(result);
  if (failed !== null) {
    throw new TollgateError("Internal", `the reseller could not buy ${capability}: ${failed[1]}`, {
      details: { supplier: capability, code: failed[1], message: failed[2]?.slice(0, 300) },
    });
  }
  try {
    return JSON.parse(result);
  } catch {
    return result;
  }
}

/**
 * The reseller capability "brief": buys a summary of the text, then its sentiment, and sells both as
 * one brief (summary plus mood). An agent-to-agent sale: the reseller pays its suppliers out of what
 * it charges, 0.04 USDC per call.
 *
 * @example
 * const brief = createBriefReseller({
 *   summarize: (input) => summarizeTool.invoke(input),
 *   sentiment: (input) => sentimentTool.invoke(input),
 * });
 */
export function createBriefReseller(suppliers: {
  summarize: BuyFunction;
  sentiment: BuyFunction;
}): Capability<typeof BriefInputSchema, typeof BriefOutputSchema> {
  return defineCapability({
    name: "brief",
    description:
      "Brief a text: a short extractive summary together with its overall mood (positive, neutral or " +
      "negative), resold from a summarizer and a sentiment specialist.",
    input: BriefInputSchema,
    output: BriefOutputSchema,
    pricing: [{ type: "one-time", amount: "0.04" }],
    handler: async ({ text, sentences }) => {
      const summary = parseWire(
        BoughtSummarySchema,
        decode("summarize", await suppliers.summarize({ text, sentences: sentences ?? 2 })),
        {
          what: "summarize result",
        },
      );
      const sentiment = parseWire(
        BoughtSentimentSchema,
        decode("sentiment", await suppliers.sentiment({ text })),
        {
          what: "sentiment result",
        },
      );
      return {
        summary: summary.summary,
        mood: sentiment.label,
        score: sentiment.score,
        sources: ["summarize", "sentiment"],
      };
    },
  });
}
