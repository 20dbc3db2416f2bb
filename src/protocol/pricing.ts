/**
 * The one pricing type (docs/protocol.md, "402 body"; docs/agents.md): every way to pay for a call, as the gate, the market and
 * the agent's policy read it — one variant per scheme's pricing, money in `bigint`. The gate compiles
 * its options into these, the market and buyers read manifests into them, and the policy weighs them.
 *
 * Conversions happen only at the wire edge, here:
 * - `WirePricingSchema` is the JSON form (decimal strings), which discovery manifests carry
 *   (`ManifestPricingSchema` is this schema); `pricingFromWire` / `pricingToWire` convert;
 * - `pricingOfOption` reads a 402 `accepts` entry into a `Pricing`, and `optionTermsOf` writes the
 *   scheme-specific part of one (`amount` and the `tollgate` terms);
 * - `pricingOfCapability` reads a seller's capability pricing (prices as written, a plan to create)
 *   into a `Pricing` once its plan exists: `CapabilityPricing` is this type as a seller writes it.
 */
import { z } from "zod";
import { AddressSchema } from "./address.ts";
import { AtomicAmountSchema, parseUnitsExact, UintStringSchema } from "./amount.ts";

/** An on-chain plan id: a canonical decimal uint256 (as `PlanIdSchema`). */
const PlanIdText = UintStringSchema;

/** Pay once per call (`exact`; x402 `exact` pays the same price). */
export const OneTimePricingTermsSchema = z.strictObject({
  type: z.literal("one-time"),
  /** Price of one call, smallest unit. */
  amount: z.bigint().positive(),
});

const planFields = {
  planId: PlanIdText,
  /** Price per period, smallest unit (the first period is charged on subscribe). */
  amount: z.bigint().positive(),
  /** Period in whole seconds. */
  interval: z.int().positive(),
  /** Units included per period (0 for none). */
  includedUnits: z.bigint().nonnegative(),
  /** Price per unit beyond the included ones, smallest unit (0 for none). */
  overageUnitPrice: z.bigint().nonnegative(),
  /** The `SubscriptionManager` holding the plan, when known. */
  manager: AddressSchema.optional(),
  /** Set when the plan is deprecated: the plan new subscribers should take. */
  successorPlanId: PlanIdText.optional(),
};

/** A flat subscription: while it is active, calls cost nothing more. */
export const SubscriptionPricingTermsSchema = z.strictObject({
  type: z.literal("subscription"),
  ...planFields,
});

/** A subscription whose calls draw `unitsPerCall` units from the plan's allowance, then pay overage. */
export const MeteredPricingTermsSchema = z.strictObject({
  type: z.literal("metered"),
  ...planFields,
  unitsPerCall: z.int().positive(),
});

/**
 * Pay per call from a prepaid channel (the `channel` scheme, docs/channels.md): `amount` per call by
 * voucher, after a deposit into the `TollgateChannels` contract (`contract`, when listed).
 */
export const ChannelPricingTermsSchema = z.strictObject({
  type: z.literal("channel"),
  /** Price of one call, smallest unit. */
  amount: z.bigint().positive(),
  /** The `TollgateChannels` contract the channel is opened in, when known. */
  contract: AddressSchema.optional(),
});

/** One way to pay for a call, by scheme. */
export const PricingSchema = z.discriminatedUnion("type", [
  OneTimePricingTermsSchema,
  SubscriptionPricingTermsSchema,
  MeteredPricingTermsSchema,
  ChannelPricingTermsSchema,
]);
export type Pricing = z.infer<typeof PricingSchema>;
export type PricingType = Pricing["type"];
/** The pricing types: also the values of a market's `scheme` filter. */
export const PricingTypes = [
  "one-time",
  "subscription",
  "metered",
  "channel",
] as const satisfies readonly PricingType[];

/** A plan's pricing (subscription or metered). */
export type PlanPricing = Extract<Pricing, { type: "subscription" | "metered" }>;

const wirePlanFields = {
  planId: PlanIdText,
  amount: AtomicAmountSchema,
  interval: z.int().positive(),
  /** Units included per period (0 for none); a JSON number on the wire. */
  includedUnits: z.int().nonnegative(),
  overageUnitPrice: AtomicAmountSchema,
  manager: AddressSchema.optional(),
};

/** The JSON form of `Pricing` (decimal strings), as discovery manifests carry it. */
export const WirePricingSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("one-time"), amount: AtomicAmountSchema }),
  z.object({ type: z.literal("subscription"), ...wirePlanFields }),
  z.object({ type: z.literal("metered"), ...wirePlanFields, unitsPerCall: z.int().positive() }),
  z.object({ type: z.literal("channel"), amount: AtomicAmountSchema, contract: AddressSchema.optional() }),
]);
export type WirePricing = z.infer<typeof WirePricingSchema>;

/** A wire entry (already parsed) as `Pricing`. */
export function pricingFromWire(entry: WirePricing): Pricing {
  if (entry.type === "one-time") return { type: "one-time", amount: BigInt(entry.amount) };
  if (entry.type === "channel") {
    return {
      type: "channel",
      amount: BigInt(entry.amount),
      ...(entry.contract === undefined ? {} : { contract: entry.contract }),
    };
  }
  const plan = {
    planId: entry.planId,
    amount: BigInt(entry.amount),
    interval: entry.interval,
    includedUnits: BigInt(entry.includedUnits),
    overageUnitPrice: BigInt(entry.overageUnitPrice),
    ...(entry.manager === undefined ? {} : { manager: entry.manager }),
  };
  return entry.type === "metered"
    ? { type: "metered", ...plan, unitsPerCall: entry.unitsPerCall }
    : { type: "subscription", ...plan };
}

/** `Pricing` as its wire entry (a deprecated plan's successor is not part of a manifest). */
export function pricingToWire(pricing: Pricing): WirePricing {
  if (pricing.type === "one-time") return { type: "one-time", amount: pricing.amount.toString() };
  if (pricing.type === "channel") {
    return {
      type: "channel",
      amount: pricing.amount.toString(),
      ...(pricing.contract === undefined ? {} : { contract: pricing.contract }),
    };
  }
  const plan = {
    planId: pricing.planId,
    amount: pricing.amount.toString(),
    interval: pricing.interval,
    includedUnits: Number(clampToSafe(pricing.includedUnits)),
    overageUnitPrice: pricing.overageUnitPrice.toString(),
    ...(pricing.manager === undefined ? {} : { manager: pricing.manager }),
  };
  return pricing.type === "metered"
    ? { type: "metered", ...plan, unitsPerCall: pricing.unitsPerCall }
    : { type: "subscription", ...plan };
}

/** The `tollgate` terms a plan's 402 option carries (docs/protocol.md, "402 body"), without the gate-wide fields. */
export type PlanOptionTerms = {
  planId: string;
  interval: number;
  manager?: `0x${string}`;
  overage?: { unitPrice: string; includedUnits: number };
  successorPlanId?: string;
};

/**
 * The scheme-specific part of a 402 option for `pricing`: its `amount` (per call, or per period for a
 * plan) and, for a plan, its `tollgate` terms (`overage` only when the plan meters).
 */
export function optionTermsOf(pricing: Pricing): { amount: bigint; tollgate?: PlanOptionTerms } {
  if (pricing.type === "one-time" || pricing.type === "channel") return { amount: pricing.amount };
  const metered = pricing.includedUnits > 0n || pricing.overageUnitPrice > 0n;
  return {
    amount: pricing.amount,
    tollgate: {
      planId: pricing.planId,
      interval: pricing.interval,
      ...(pricing.manager === undefined ? {} : { manager: pricing.manager }),
      ...(metered
        ? {
            overage: {
              unitPrice: pricing.overageUnitPrice.toString(),
              // The wire carries a JSON number; no real plan includes more than 2^53 units.
              includedUnits: Number(clampToSafe(pricing.includedUnits)),
            },
          }
        : {}),
      ...(pricing.successorPlanId === undefined ? {} : { successorPlanId: pricing.successorPlanId }),
    },
  };
}

/** What `pricingOfOption` reads of a 402 option (a `PaymentOption` satisfies it). */
export type OptionView = {
  scheme: string;
  amount: string;
  tollgate?:
    | {
        planId?: string | undefined;
        interval?: number | undefined;
        manager?: `0x${string}` | undefined;
        overage?: { unitPrice: string; includedUnits: number } | undefined;
        successorPlanId?: string | undefined;
      }
    | undefined;
};

/**
 * A 402 option as `Pricing`: `exact` → one-time, `subscription` → subscription (a 402 does not say
 * how many units a call draws; the manifest's `metered` entry does). `undefined` for another scheme,
 * or a subscription option lacking its plan terms.
 */
export function pricingOfOption(option: OptionView): Pricing | undefined {
  const amount = BigInt(option.amount);
  if (option.scheme === "exact") return amount > 0n ? { type: "one-time", amount } : undefined;
  if (option.scheme === "channel") return amount > 0n ? { type: "channel", amount } : undefined;
  if (option.scheme !== "subscription") return undefined;
  const ext = option.tollgate;
  if (ext?.planId === undefined || ext.interval === undefined || amount <= 0n) return undefined;
  return {
    type: "subscription",
    planId: ext.planId,
    amount,
    interval: ext.interval,
    includedUnits: BigInt(ext.overage?.includedUnits ?? 0),
    overageUnitPrice: BigInt(ext.overage?.unitPrice ?? "0"),
    ...(ext.manager === undefined ? {} : { manager: ext.manager }),
    ...(ext.successorPlanId === undefined ? {} : { successorPlanId: ext.successorPlanId }),
  };
}

function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

/**
 * The price of one call under `pricing`, smallest unit, rounded up so a buyer's ceiling is never
 * exceeded by rounding:
 * - `one-time` and `channel`: its amount;
 * - `subscription`: the period price (how many calls a period will see is the buyer's forecast, not
 *   the catalog's, so one call is assumed to cost one period);
 * - `metered`: the period price spread over the calls the included units cover,
 *   ⌈amount ÷ ⌊includedUnits ÷ unitsPerCall⌋⌉; when not even one call is included, the price of a
 *   single call: amount + (unitsPerCall − includedUnits) × overageUnitPrice.
 */
export function perCallPrice(pricing: Pricing): bigint {
  if (pricing.type !== "metered") return pricing.amount;
  const units = BigInt(pricing.unitsPerCall);
  const callsPerPeriod = pricing.includedUnits / units;
  if (callsPerPeriod > 0n) return ceilDiv(pricing.amount, callsPerPeriod);
  return pricing.amount + (units - pricing.includedUnits) * pricing.overageUnitPrice;
}

function clampToSafe(value: bigint): bigint {
  return value > BigInt(Number.MAX_SAFE_INTEGER) ? BigInt(Number.MAX_SAFE_INTEGER) : value;
}

/**
 * The pricing types a seller writes for a capability (`CapabilityPricing`, src/agent/tools/capability.ts):
 * the one pricing type as written before it is on chain. A subscription is written as a plan to create
 * (its id and manager come with its creation); `metered` is not written: a plan that includes units
 * and prices overage meters.
 */
export const CapabilityPricingTypes = [
  "one-time",
  "subscription",
  "channel",
] as const satisfies readonly PricingType[];
export type CapabilityPricingType = (typeof CapabilityPricingTypes)[number];

/** A price as a seller writes one: `amount` in smallest units or `price` in decimal USDC text. */
type WrittenPrice = { amount?: number | bigint | string | undefined; price?: string | undefined };

/** What `pricingOfCapability` reads of a capability's pricing entry (a `CapabilityPricing` satisfies it). */
export type CapabilityPricingView =
  | ({ type: "one-time" | "channel" } & WrittenPrice)
  | { type: "subscription"; plan: WrittenPrice & { interval: number; includedUnits: number } };

/** A seller's plan once created on chain, as `pricingOfCapability` completes a subscription entry. */
export type CreatedPlanTerms = {
  planId: string;
  amount: bigint;
  interval: number;
  includedUnits: number;
  overageUnitPrice: bigint;
  manager?: `0x${string}` | undefined;
};

/** A written price in smallest units (an entry checked by its schema: exactly one of the two). */
export function writtenAmount(entry: WrittenPrice): bigint {
  return entry.amount !== undefined ? BigInt(entry.amount) : parseUnitsExact(entry.price ?? "");
}

/**
 * A capability's pricing entry as the one `Pricing` that gates, manifests, the market and the policy
 * read: a one-time or channel price converted to smallest units; a subscription completed with its
 * created plan (`metered`, one unit per call, when the plan includes units and prices overage).
 * `undefined` for a subscription entry without a created plan.
 */
export function pricingOfCapability(
  entry: CapabilityPricingView,
  created: { plan?: CreatedPlanTerms | undefined; channels?: `0x${string}` | undefined } = {},
): Pricing | undefined {
  if (entry.type === "one-time") return { type: "one-time", amount: writtenAmount(entry) };
  if (entry.type === "channel") {
    return {
      type: "channel",
      amount: writtenAmount(entry),
      ...(created.channels === undefined ? {} : { contract: created.channels }),
    };
  }
  const plan = created.plan;
  if (plan === undefined) return undefined;
  const terms = {
    planId: plan.planId,
    amount: plan.amount,
    interval: plan.interval,
    includedUnits: BigInt(plan.includedUnits),
    overageUnitPrice: plan.overageUnitPrice,
    ...(plan.manager === undefined ? {} : { manager: plan.manager }),
  };
  return plan.includedUnits > 0 && plan.overageUnitPrice > 0n
    ? { type: "metered", ...terms, unitsPerCall: 1 }
    : { type: "subscription", ...terms };
}
