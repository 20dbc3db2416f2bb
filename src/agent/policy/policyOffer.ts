import { z } from "zod";
import { AddressSchema } from "../../protocol/address.ts";
import { PlanIdSchema } from "../../protocol/paymentRequired.ts";

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

/**
 * The choices one 402 offers, reduced to what the subscribe-or-pay decision needs: the provider
 * (payee), the one-time price, and the subscription plan. Either choice may be missing.
 */
export const PolicyOfferSchema = z.strictObject({
  provider: AddressSchema,
  oneTime: z.strictObject({ amount: z.bigint().positive() }).optional(),
  subscription: PolicyPlanSchema.optional(),
});
export type PolicyOffer = z.output<typeof PolicyOfferSchema>;
export type PolicyOfferInput = z.input<typeof PolicyOfferSchema>;
