/**
 * The `subscription` scheme's agent part: a plan paid by the period, calls included (up to its
 * allowance, then overage). Its 402 options are held to a listed plan's terms, and the policy weighs
 * them as subscribing. A listed `metered` entry sells the same plans (the metered part). The agent
 * operator's page of an agent shows the subscriptions it holds (its `dashboard`).
 */
import { type AgentSchemePart, type OfferDeviation, usdcText } from "../../agent/agentScheme.ts";
import { policyPlanOf } from "../../agent/policy/policyOffer.ts";
import { sameAddress } from "../../protocol/address.ts";
import { HeaderName } from "../../protocol/header.ts";
import type { ManifestPricing } from "../../protocol/manifest.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import { type PaymentOption, planTermsOf } from "../../protocol/paymentRequired.ts";
import { pricingOfOption } from "../../protocol/pricing.ts";
import { describeOverage, describePeriod } from "./agent/describePlan.ts";
import { subscriptionDashboard } from "./agent/subscriptionDashboard.ts";
import { subscriptionPurchase } from "./agent/subscriptionPurchase.ts";

/** A listed entry that sells a plan (a `subscription` or `metered` entry), read by its plan fields. */
type ListedPlanEntry = Extract<ManifestPricing, { planId: string }>;

function isPlan(entry: ManifestPricing): entry is ListedPlanEntry {
  return "planId" in entry;
}

/**
 * A `subscription` option conforms when it names a listed plan (same id) with a price, interval,
 * allowance and overage price no worse for the buyer than listed, sold through the listed manager.
 */
function planDeviation(
  option: PaymentOption,
  listed: readonly ManifestPricing[],
): OfferDeviation | undefined {
  const terms = planTermsOf(option);
  if (terms === undefined) return { field: "plan", listed: "a plan", asked: "an option without plan terms" };
  const entry = listed.filter(isPlan).find((p) => p.planId === terms.planId);
  if (entry === undefined) {
    const plans = listed.filter(isPlan).map((p) => p.planId);
    return {
      field: "plan",
      listed: plans.length === 0 ? "no plan" : `plan ${plans.join(", ")}`,
      asked: `plan ${terms.planId}`,
    };
  }
  if (BigInt(terms.amount) > BigInt(entry.amount)) {
    return {
      field: "price",
      listed: `${usdcText(entry.amount)} per period`,
      asked: `${usdcText(terms.amount)} per period`,
    };
  }
  if (terms.interval !== entry.interval) {
    return { field: "plan", listed: `interval ${entry.interval} s`, asked: `interval ${terms.interval} s` };
  }
  if (terms.includedUnits < entry.includedUnits) {
    return {
      field: "plan",
      listed: `${entry.includedUnits} included units`,
      asked: `${terms.includedUnits} included units`,
    };
  }
  if (BigInt(terms.overageUnitPrice) > BigInt(entry.overageUnitPrice)) {
    return {
      field: "price",
      listed: `overage ${usdcText(entry.overageUnitPrice)} per unit`,
      asked: `overage ${usdcText(terms.overageUnitPrice)} per unit`,
    };
  }
  if (entry.manager !== undefined && !sameAddress(entry.manager, terms.manager)) {
    return { field: "plan", listed: `manager ${entry.manager}`, asked: `manager ${terms.manager}` };
  }
  return undefined;
}

/** The budget's key for a plan's commitment to one seller: its renewals and retries replace it. */
export function planRef(planId: string, seller: string): string {
  return `plan:${planId}@${seller}`;
}

export const subscriptionAgent: AgentSchemePart = {
  listing: {
    types: ["subscription"],
    describe: (entry) => {
      if (!isPlan(entry)) return `subscription ${usdcText(entry.amount)}`;
      const period = describePeriod(entry);
      if (entry.includedUnits > 0) {
        return `subscription ${period} with ${entry.includedUnits} calls included${describeOverage(entry)}`;
      }
      return `subscription ${period}, calls included`;
    },
    commits: true,
    spend: (entry, seller) => ({
      kind: "subscription",
      ref: planRef(isPlan(entry) ? entry.planId : "?", seller),
    }),
    sale: {
      missing: (setup) => (setup.plan === undefined ? "has no plan" : undefined),
      gateEntry: (_entry, setup) => ({ type: "subscription", plan: setup.plan?.planId }),
    },
  },
  offer: {
    check: planDeviation,
    policyTerms: (option) => {
      if (planTermsOf(option) === undefined) return undefined;
      // Read through the one pricing type; a zero price is none (a gate answering 402 asks for money).
      const plan = pricingOfOption(option);
      return {
        choice: "subscription",
        terms: plan !== undefined && "planId" in plan ? policyPlanOf(plan) : undefined,
      };
    },
    spendMode: "subscription",
  },
  // Over MCP the subscription's two headers ride as one `{ id, auth }`.
  mcpCredentials: {
    [McpMetaKey.TollgateSubscription]: (headers: Headers) => {
      const id = headers.get(HeaderName.Subscription);
      const auth = headers.get(HeaderName.SubscriptionAuth);
      return id === null || auth === null ? undefined : { id, auth };
    },
  },
  purchase: subscriptionPurchase,
  dashboard: subscriptionDashboard,
};
