/**
 * What a paid tool costs, written for the model that chooses tools: each pricing entry of a
 * capability's manifest as one short sentence, appended to the tool's description. A model that reads
 * the price can prefer the cheaper of two tools that do the same thing, and can tell a user what a
 * plan will cost before it is bought.
 */
import type { ManifestPricing } from "../../protocol/manifest.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import { defaultAgentSchemes } from "../agentSchemes.ts";

/**
 * One pricing entry in words, as the scheme that lists it describes it (its agent part):
 * - one-time: `"0.02 USDC per call, paid once per call"`;
 * - channel: `"0.01 USDC per call from a prepaid channel (…)"`;
 * - subscription: `"subscription 1 USDC every 30 days, calls included"` (with its included units and
 *   overage price when it has them);
 * - metered: `"metered subscription 1 USDC every 30 days with 100 units included, then 0.001 USDC per
 *   unit; a call uses 1 unit"`.
 *
 * An entry of a type no scheme lists is named by its type.
 */
export function describePricingEntry(
  entry: ManifestPricing,
  schemes: AgentSchemes = defaultAgentSchemes,
): string {
  return schemes.listing(entry.type)?.describe(entry) ?? `${entry.type} pricing`;
}

/** `"Price: 0.02 USDC per call, paid once per call; or subscription 1 USDC every 30 days, calls included."` */
export function describePricing(
  pricing: readonly ManifestPricing[],
  schemes: AgentSchemes = defaultAgentSchemes,
): string {
  if (pricing.length === 0) return "Price: free.";
  return `Price: ${pricing.map((entry) => describePricingEntry(entry, schemes)).join("; or ")}.`;
}

/**
 * The description a model reads for a paid tool: the seller's description, then its price. The
 * seller's text is kept first and whole; the price sentence is Tollgate's, from the same catalog entry
 * the agent checks the 402 against.
 */
export function withPricing(
  description: string,
  pricing: readonly ManifestPricing[] | undefined,
  schemes: AgentSchemes = defaultAgentSchemes,
): string {
  if (pricing === undefined) return description;
  const text = description.trimEnd();
  const separator = text === "" ? "" : /[.!?]$/.test(text) ? " " : ". ";
  return `${text}${separator}${describePricing(pricing, schemes)}`;
}

/**
 * The most one call can reserve under these prices: the largest one-time amount or period price. A
 * spend-approval question asks about this bound, since which way the policy pays is decided later.
 */
export function maxCallPrice(pricing: readonly ManifestPricing[]): bigint {
  let most = 0n;
  for (const entry of pricing) {
    const amount = BigInt(entry.amount);
    if (amount > most) most = amount;
  }
  return most;
}

/** The cheapest way to pay for one call: what the budget must have room for before a call is made. */
export function minCallPrice(pricing: readonly ManifestPricing[]): bigint | undefined {
  let least: bigint | undefined;
  for (const entry of pricing) {
    const amount = BigInt(entry.amount);
    if (least === undefined || amount < least) least = amount;
  }
  return least;
}

/**
 * What a paid tool carries in its LangChain `metadata` under `tollgate`: its seller (the market
 * identity its spends are keyed by) and listed prices. Callbacks see it on every run of the tool, and
 * the orchestrator reads it to check the budget and ask for approval before a call is made.
 */
export type PaidToolMetadata = { seller: string; pricing: readonly ManifestPricing[] };

export function paidToolMetadata(listing: PaidToolMetadata): { tollgate: PaidToolMetadata } {
  return { tollgate: { seller: listing.seller, pricing: listing.pricing } };
}

/** The `tollgate` metadata of a tool, when it is a paid tool made from a listing. */
export function paidToolMetadataOf(tool: { metadata?: Record<string, unknown> | undefined } | undefined) {
  const meta = tool?.metadata?.tollgate as Partial<PaidToolMetadata> | undefined;
  if (meta === undefined || typeof meta.seller !== "string" || !Array.isArray(meta.pricing)) return undefined;
  return meta as PaidToolMetadata;
}
