/**
 * The `exact` scheme's agent part: a `one-time` price, paid once per call. Its 402 options are held
 * to the listed one-time price, and the policy weighs them as paying once.
 */
import { type AgentSchemePart, type OfferDeviation, usdcText } from "../../agent/agentScheme.ts";
import { HeaderName } from "../../protocol/header.ts";
import type { ManifestPricing } from "../../protocol/manifest.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import { writtenAmount } from "../../protocol/pricing.ts";
import { exactPurchase } from "./agent/exactPurchase.ts";

/**
 * What paying `amount` once asks beyond the listed one-time price (none listed, or a higher one). The
 * x402 `exact` part holds its requirements to the same price.
 */
export function oneTimeDeviation(
  amount: string,
  listed: readonly ManifestPricing[],
): OfferDeviation | undefined {
  const entry = listed.find((p) => p.type === "one-time");
  if (entry === undefined)
    return { field: "scheme", listed: "no one-time price", asked: "a one-time payment" };
  if (BigInt(amount) > BigInt(entry.amount)) {
    return { field: "price", listed: usdcText(entry.amount), asked: usdcText(amount) };
  }
  return undefined;
}

export const exactAgent: AgentSchemePart = {
  listing: {
    types: ["one-time"],
    describe: (entry) => `${usdcText(entry.amount)} per call, paid once per call`,
    commits: false,
    spend: () => ({ kind: "one-time" }),
    sale: {
      missing: () => undefined,
      gateEntry: (entry) => ({
        type: "one-time",
        amount: writtenAmount(entry as Parameters<typeof writtenAmount>[0]),
      }),
    },
  },
  offer: {
    check: (option, listed) => oneTimeDeviation(option.amount, listed),
    policyTerms: (option) => {
      // A gate answering 402 asks for money: a zero price is none.
      const amount = BigInt(option.amount);
      return { choice: "oneTime", terms: amount > 0n ? { amount } : undefined };
    },
    spendMode: "one-time",
    readsBack: true,
  },
  mcpCredentials: { [McpMetaKey.TollgatePayment]: HeaderName.Payment },
  purchase: exactPurchase,
};
