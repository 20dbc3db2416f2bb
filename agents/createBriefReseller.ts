import { z } from "zod";
import type { BudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type CallAllowance, createCallAllowance, fundedAllowance } from "../src/agent/callAllowance.ts";
import {
  type Admissible,
  type BudgetAdmissionOptions,
  createBudgetAdmission,
  saleFundingOf,
} from "../src/agent/saleAdmission.ts";
import { type Capability, type CapabilityContext, defineCapability } from "../src/agent/tools/capability.ts";
import { parseUnitsExact } from "../src/protocol/amount.ts";
import { TollgateError } from "../src/protocol/errors.ts";

/**
 * Buys one call of another specialist's capability and returns its result as received. In production
 * this is a paid tool (the 402 is handled by the payer) invoked with `withCallAllowance(allowance)`,
 * so it spends within what the sale earned; in tests, a local handler. `allowance` is absent for a
 * local call of the reseller (nothing was earned, nothing is bounded).
 */
export type BuyFunction = (input: Record<string, unknown>, allowance?: CallAllowance) => Promise<unknown>;

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
function decode(result: unknown): { failed: { code: string; message: string } } | { value: unknown } {
  if (typeof result !== "string") return { value: result };
  const failed = /^ERROR ([A-Za-z][A-Za-z0-9]*): ?([\s\S]*)$/.exec(result);
  if (failed !== null) return { failed: { code: failed[1]!, message: (failed[2] ?? "").slice(0, 300) } };
  try {
    return { value: JSON.parse(result) };
  } catch {
    return { value: result };
  }
}

/**
 * Supplier failures a second attempt cannot fix: the reseller's own limits refused the purchase, or
 * the supplier asked for something it did not list. Anything else (the supplier failed, was
 * unreachable, or answered malformed) is tried again.
 */
const FINAL_CODES = new Set([
  "BudgetExceeded",
  "ApprovalDenied",
  "OfferMismatch",
  "PriceCeilingExceeded",
  "InsufficientFunds",
  "InvalidRequest",
]);

/** The default price of a brief: it covers the worst single call (a summary and a sentiment plan's first period). */
export const BRIEF_PRICE = "0.08";

export type BriefResellerOptions = {
  /** Extra attempts of a failed supplier purchase within one call, inside its allowance (default 1). */
  retries?: number | undefined;
  /** What a brief costs, decimal USDC (default `BRIEF_PRICE`). */
  price?: string | undefined;
  /** How long a failed sale is kept for its buyer's re-sent proof (default 1 h, a proof's longest life). */
  saleTtlMs?: number | undefined;
  now?: (() => number) | undefined;
  /**
   * The reseller's own budget: each sale is admitted only once the brief's price is reserved in it for
   * the suppliers, before the buyer pays (src/agent/saleAdmission.ts); a sale it cannot reserve is
   * refused with `SaleNotAdmitted`, nothing charged. `keepFree` is budget kept beside admitted sales for
   * the subscriptions the reseller takes across its sales. `purchases` (what a sale pays each supplier,
   * by its identity) are reserved under each supplier, so its per-provider and per-call limits are
   * met at admission too. Without `admission`, sales are not admitted (tests).
   */
  admission?:
    | {
        budget: BudgetLedger;
        agent: string;
        keepFree?: bigint | undefined;
        purchases?: BudgetAdmissionOptions["purchases"];
      }
    | undefined;
};

/** One paid call of the reseller: its allowance and what was bought for it so far. */
type Sale = { allowance: CallAllowance; bought: Map<string, unknown>; openedAt: number };

/** Failed sales kept at most, oldest dropped first: a buyer cannot make the reseller hold unbounded state. */
const MAX_OPEN_SALES = 1_000;

/**
 * The reseller capability "brief": buys a summary of the text, then its sentiment, and sells both as
 * one brief (summary plus mood). An agent-to-agent sale, and the reseller spends inside it:
 *
 * - **One allowance per payment.** What its suppliers are paid for one brief never exceeds what the
 *   buyer paid for it (`context.sale.earned`): every purchase is held against the sale's allowance
 *   before the reseller's own budget (src/agent/callAllowance.ts).
 * - **Retry, then give the proof back.** A failed purchase is tried again (`retries`) while the
 *   allowance covers it (a proof the supplier gave back is redeemed, not paid again); if it still
 *   fails, the brief fails with `Internal` (HTTP 500), so the gate gives the buyer its proof back and
 *   the buyer's payer re-sends it (docs/gate.md). The re-sent proof finds the same sale: what was
 *   bought is reused and the allowance is not renewed, so one payment funds one allowance however
 *   often its proof is presented. A supplier's malformed result is a 500 too: never resold, never
 *   charged to the buyer.
 *
 * @example
 * const brief = createBriefReseller({
 *   summarize: (input, allowance) => summarizeTool.invoke(input, allowance && withCallAllowance(allowance)),
 *   sentiment: (input, allowance) => sentimentTool.invoke(input, allowance && withCallAllowance(allowance)),
 * });
 */
export function createBriefReseller(
  suppliers: {
    summarize: BuyFunction;
    sentiment: BuyFunction;
  },
  options: BriefResellerOptions = {},
): Capability<typeof BriefInputSchema, typeof BriefOutputSchema> & Partial<Admissible> {
  const retries = options.retries ?? 1;
  const price = options.price ?? BRIEF_PRICE;
  const ttl = options.saleTtlMs ?? 3_600_000;
  const now = options.now ?? Date.now;
  const sales = new Map<string, Sale>();

  const open = (sale: CapabilityContext["sale"]): Sale | undefined => {
    if (sale === undefined) return undefined;
    const at = now();
    for (const [key, s] of sales) {
      if (at - s.openedAt < ttl && sales.size < MAX_OPEN_SALES) break;
      sales.delete(key); // insertion order: the oldest first
    }
    let found = sales.get(sale.key);
    if (found === undefined) {
      found = { allowance: createCallAllowance(sale.earned), bought: new Map(), openedAt: at };
      sales.set(sale.key, found);
    }
    return found;
  };

  /** One supplier purchase for `sale`: reused if already bought, retried within the allowance. */
  const buy = async <T>(
    sale: Sale | undefined,
    allowance: CallAllowance | undefined,
    name: string,
    supplier: BuyFunction,
    input: Record<string, unknown>,
    schema: z.ZodType<T>,
  ): Promise<T> => {
    if (sale?.bought.has(name)) return sale.bought.get(name) as T;
    let last: { code: string; message: string } = { code: "Internal", message: "" };
    for (let attempt = 0; attempt <= retries; attempt++) {
      const outcome = decode(await supplier(input, allowance));
      if ("value" in outcome) {
        const parsed = schema.safeParse(outcome.value);
        if (parsed.success) {
          sale?.bought.set(name, parsed.data);
          return parsed.data;
        }
        last = { code: "Internal", message: `the ${name} result is malformed` };
      } else {
        last = outcome.failed;
        if (FINAL_CODES.has(last.code)) break;
      }
    }
    // HTTP 500: the gate gives the buyer's proof back, and the sale stays open for its re-send.
    throw new TollgateError("Internal", `the reseller could not buy ${name}: ${last.code}`, {
      details: {
        supplier: name,
        code: last.code,
        message: last.message,
        ...(sale === undefined
          ? {}
          : { allowance: sale.allowance.limit.toString(), spent: sale.allowance.spent().toString() }),
      },
    });
  };

  const capability = defineCapability({
    name: "brief",
    description:
      "Brief a text: a short extractive summary together with its overall mood (positive, neutral or " +
      "negative), resold from a summarizer and a sentiment specialist.",
    input: BriefInputSchema,
    output: BriefOutputSchema,
    pricing: [{ type: "one-time", price }],
    handler: async ({ text, sentences }, context) => {
      const sale = open(context.sale);
      // Purchases reserve within the sale's admitted reservation, when it was admitted.
      const allowance = sale && fundedAllowance(sale.allowance, saleFundingOf(context.sale));
      const summary = await buy(
        sale,
        allowance,
        "summarize",
        suppliers.summarize,
        { text, sentences: sentences ?? 2 },
        BoughtSummarySchema,
      );
      const sentiment = await buy(
        sale,
        allowance,
        "sentiment",
        suppliers.sentiment,
        { text },
        BoughtSentimentSchema,
      );
      // Served: the buyer's proof is used up, so no re-send will look for this sale.
      if (context.sale !== undefined) sales.delete(context.sale.key);
      return {
        summary: summary.summary,
        mood: sentiment.label,
        score: sentiment.score,
        sources: ["summarize", "sentiment"],
      };
    },
  });
  if (options.admission === undefined) return capability;
  const admission = createBudgetAdmission({
    ...options.admission,
    amount: parseUnitsExact(price),
  });
  return Object.assign(capability, { admission });
}
