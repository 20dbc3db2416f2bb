import { z } from "zod";
import { AddressSchema } from "../../protocol/address.ts";
import { PlanIdSchema } from "../../protocol/paymentRequired.ts";
import type { PlanPricing } from "../../protocol/pricing.ts";

/** A subscription plan's terms as the policy weighs them; amounts in the token's smallest unit. */
export const PolicyPlanSchema = z.strictObject({
  planId: PlanIdSchema.optional(),
  /** Price of one period. */
  amount: z.bigint().positive(),
  /** Period in whole seconds. */
  interval: z.int().positive(),
  /** Metered units included per period (0 when the plan has no allowance). */
  includedUnits: z.int().nonnegative().default(0),
  /** Price per unit beyond the included ones (0: use beyond the allowance is free or not metered). */
  overageUnitPrice: z.bigint().nonnegative().default(0n),
});
export type PolicyPlan = z.output<typeof PolicyPlanSchema>;

/** A plan of the one pricing type (`src/protocol/pricing.ts`) as the policy weighs it. */
export function policyPlanOf(pricing: PlanPricing): PolicyPlan {
  return {
    planId: pricing.planId,
    amount: pricing.amount,
    interval: pricing.interval,
    // No real plan includes more than 2^53 units per period.
    includedUnits: Number(
      pricing.includedUnits > BigInt(Number.MAX_SAFE_INTEGER)
        ? BigInt(Number.MAX_SAFE_INTEGER)
        : pricing.includedUnits,
    ),
    overageUnitPrice: pricing.overageUnitPrice,
  };
}

/** A prepaid channel's terms as the policy weighs them: the price per call and the smallest deposit. */
export const PolicyChannelSchema = z.strictObject({
  /** Price of one call, paid by voucher. */
  amount: z.bigint().positive(),
  /** The smallest deposit the gate opens a channel with. */
  minDeposit: z.bigint().nonnegative().default(0n),
});
export type PolicyChannel = z.output<typeof PolicyChannelSchema>;

/**
 * The choices one 402 offers, reduced to what the decision needs: the provider (payee), the one-time
 * price, the subscription plan and the prepaid channel. Any choice may be missing.
 */
export const PolicyOfferSchema = z.strictObject({
  provider: AddressSchema,
  oneTime: z.strictObject({ amount: z.bigint().positive() }).optional(),
  subscription: PolicyPlanSchema.optional(),
  channel: PolicyChannelSchema.optional(),
});
export type PolicyOffer = z.output<typeof PolicyOfferSchema>;
export type PolicyOfferInput = z.input<typeof PolicyOfferSchema>;
