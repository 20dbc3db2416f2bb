/**
 * The `channel` scheme's agent part: a price per call paid by voucher from a prepaid channel. Its 402
 * options are held to the listed channel price and contract, the policy weighs them as a channel, and
 * one whose close delay is above the agent's bound is refused before a deposit is locked.
 */
import { type AgentSchemePart, type OfferDeviation, usdcText } from "../../agent/agentScheme.ts";
import { sameAddress } from "../../protocol/address.ts";
import { CHANNEL_VOUCHER_HEADER } from "../../protocol/channelVoucher.ts";
import type { ManifestPricing } from "../../protocol/manifest.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import type { PaymentOption } from "../../protocol/paymentRequired.ts";
import { writtenAmount } from "../../protocol/pricing.ts";
import { channelPurchase } from "./agent/channelPurchase.ts";
import { CHANNEL_RECEIPT_HEADER } from "./channelHeaders.ts";
import { channelTermsOf } from "./channelTerms.ts";
import { closeDelayRefusal } from "./client/channelWallet.ts";

/**
 * A `channel` option conforms when the listing prices the capability by channel, the price per call
 * is no more than listed, the terms are well formed, and the contract is the listed one (when listed).
 */
function channelDeviation(
  option: PaymentOption,
  listed: readonly ManifestPricing[],
): OfferDeviation | undefined {
  const entry = listed.find((p) => p.type === "channel");
  if (entry === undefined || entry.type !== "channel") {
    return { field: "scheme", listed: "no channel price", asked: "a prepaid channel" };
  }
  const terms = channelTermsOf(option);
  if (terms === undefined) {
    return { field: "scheme", listed: "channel terms", asked: "a channel option without valid terms" };
  }
  if (terms.price > BigInt(entry.amount)) {
    return {
      field: "price",
      listed: `${usdcText(entry.amount)} per call`,
      asked: `${usdcText(terms.price)} per call`,
    };
  }
  if (entry.contract !== undefined && !sameAddress(entry.contract, terms.contract)) {
    return {
      field: "scheme",
      listed: `channel contract ${entry.contract}`,
      asked: `channel contract ${terms.contract}`,
    };
  }
  return undefined;
}

export const channelAgent: AgentSchemePart = {
  listing: {
    types: ["channel"],
    describe: (entry) =>
      `${usdcText(entry.amount)} per call from a prepaid channel (a refundable deposit, then no wait per call)`,
    commits: true,
    spend: () => ({ kind: "one-time" }),
    sale: {
      missing: (setup) =>
        setup.channelsContract === undefined ? "the specialist has no channels contract" : undefined,
      gateEntry: (entry) => ({
        type: "channel",
        amount: writtenAmount(entry as Parameters<typeof writtenAmount>[0]),
      }),
    },
  },
  offer: {
    check: channelDeviation,
    policyTerms: (option) => {
      const terms = channelTermsOf(option);
      if (terms === undefined) return undefined;
      return {
        choice: "channel",
        terms: terms.price > 0n ? { amount: terms.price, minDeposit: terms.minDeposit } : undefined,
      };
    },
    spendMode: "channel",
    // A gate whose minimum close delay is above the agent's bound would let its seller, should it
    // vanish, keep the deposit locked that long after the agent asked to close.
    refusal: (option, bounds, tool) => {
      const terms = channelTermsOf(option);
      return terms === undefined ? undefined : closeDelayRefusal(terms, bounds.maxCloseDelay, tool);
    },
  },
  // Over MCP a channel-paid result carries its receipt in `_meta["tollgate/channel-receipt"]`.
  mcpReceipts: { [McpMetaKey.TollgateChannelReceipt]: CHANNEL_RECEIPT_HEADER },
  mcpCredentials: { [McpMetaKey.TollgateChannel]: CHANNEL_VOUCHER_HEADER },
  purchase: channelPurchase,
};
