/**
 * The shape of a capability a specialist sells or an agent runs locally: a named, described, typed
 * handler with its suggested pricing. `createSpecialist` serves capabilities behind the gate;
 * `capabilityTool` turns one into a LangChain tool for local use.
 */
import { z } from "zod";
import { type Amount, AmountSchema } from "../../gate/amount.ts";
import { PriceTextSchema } from "../../gate/paymentGateOptions.ts";
import { parseUnitsExact } from "../../protocol/amount.ts";
import { CapabilityNameSchema } from "../../protocol/manifest.ts";
import {
  type CapabilityPricingType,
  type CapabilityPricingView,
  writtenAmount,
} from "../../protocol/pricing.ts";

/** Decimal USDC text as people write prices (`"0.02"`), at most 6 decimals, converted exactly later. */
export const UsdcTextSchema = z
  .string()
  .max(100)
  .refine(
    (text) => {
      try {
        parseUnitsExact(text);
        return true;
      } catch {
        return false;
      }
    },
    { error: 'expected decimal USDC text such as "0.02" (at most 6 decimals)' },
  );

/**
 * A price as the gate reads one (docs/gate.md, "Pricing"): `amount` in smallest units (`20000`,
 * `20_000n`, `"20000"`) or `price` in decimal USDC text (`"0.02"`), exactly one. Decimal text under
 * `amount` is refused with a message naming both readings, never read as 10⁶ times the price.
 */
const priceFields = {
  amount: AmountSchema.optional(),
  price: PriceTextSchema.pipe(UsdcTextSchema).optional(),
};
const exactlyOnePrice = [
  (entry: { amount?: unknown; price?: unknown }) =>
    (entry.amount === undefined) !== (entry.price === undefined),
  { error: 'give exactly one of `amount` (smallest units: 20000) and `price` (USDC text: "0.02")' },
] as const;

/** A price entry's amount in smallest units (the entry has passed its schema). */
export function pricingAmount(entry: { amount?: Amount | undefined; price?: string | undefined }): bigint {
  return writtenAmount(entry);
}

/** Pay once per call: `{ type: "one-time", price: "0.02" }` or `{ type: "one-time", amount: 20000 }`. */
export const OneTimeCapabilityPricingSchema = z
  .strictObject({ type: z.literal("one-time"), ...priceFields })
  .refine(...exactlyOnePrice);

/**
 * A subscription plan the seller creates on chain: `price` (USDC text) or `amount` (smallest units)
 * per `interval` seconds, `includedUnits` per period, then `overageUnitPrice` (USDC text, a price) per
 * unit. With included units and an overage price it is metered: each call draws
 * `capability.units(input)` units (1 when the capability does not say).
 */
export const SubscriptionCapabilityPricingSchema = z.strictObject({
  type: z.literal("subscription"),
  plan: z
    .strictObject({
      ...priceFields,
      interval: z.int().positive(),
      includedUnits: z.int().nonnegative(),
      overageUnitPrice: UsdcTextSchema,
    })
    .refine(...exactlyOnePrice),
});

/**
 * Pay per call from a prepaid channel: `{ type: "channel", price: "0.01" }` (a buyer deposits once, then
 * each call carries a voucher checked locally by the gate; `createSpecialist({ channels })` enables it).
 */
export const ChannelCapabilityPricingSchema = z
  .strictObject({ type: z.literal("channel"), ...priceFields })
  .refine(...exactlyOnePrice);

/**
 * The one pricing type (`Pricing`, src/protocol/pricing.ts) as a seller writes it for a capability:
 * its types are `CapabilityPricingTypes`, and `pricingOfCapability` turns an entry into the `Pricing`
 * the gate, the manifest, the market and the policy read once its plan exists.
 */
export const CapabilityPricingSchema = z.discriminatedUnion("type", [
  OneTimeCapabilityPricingSchema,
  SubscriptionCapabilityPricingSchema,
  ChannelCapabilityPricingSchema,
]);
export type CapabilityPricing = z.infer<typeof CapabilityPricingSchema>;
/** Compile-time link: every written entry is a `CapabilityPricingView` of a `CapabilityPricingType`. */
type Holds<T extends true> = T;
export type CapabilityPricingIsPricing = Holds<
  CapabilityPricing extends CapabilityPricingView
    ? CapabilityPricing["type"] extends CapabilityPricingType
      ? CapabilityPricingType extends CapabilityPricing["type"]
        ? true
        : false
      : false
    : false
>;

/** What a handler is given besides its input. */
export type CapabilityContext = {
  /** Aborted when the caller gives up (the HTTP request closed, the agent run was cancelled). */
  signal?: AbortSignal | undefined;
  /**
   * The sale this call is: what the buyer paid for it and a key naming that payment, set by
   * `createSpecialist` for a call the gate let through (`earned` is the one-time amount, or the
   * overage a subscription call was charged: 0 within included units). A reseller bounds what it
   * spends on suppliers for the call by `earned`; the key is the same when the buyer re-sends its
   * proof after a 5xx, so one payment funds one allowance. Absent for local calls.
   */
  sale?: { key: string; earned: bigint } | undefined;
};

/** Any zod object schema: capability inputs are objects, as LangChain and OpenAI tools require. */
export type CapabilityInputSchemaType = z.ZodType<Record<string, unknown>>;

/**
 * A capability: `input` and `output` are zod schemas (the manifest publishes their JSON Schema),
 * `handler` maps a parsed input to an output, `pricing` is the seller's suggestion.
 */
export type Capability<
  Input extends CapabilityInputSchemaType = CapabilityInputSchemaType,
  Output extends z.ZodType = z.ZodType,
> = {
  /** A tool-safe name (1–64 of `[a-zA-Z0-9_-]`), unique within a specialist. */
  name: string;
  /** What it does, written for a model (or the rule planner) choosing tools. */
  description: string;
  input: Input;
  output: Output;
  pricing: CapabilityPricing[];
  // Method syntax on purpose: TypeScript checks method parameters bivariantly, so a capability with
  // specific schemas is assignable to the general `Capability` that hosts and loaders take.
  /** Metered units one call draws from a subscription's allowance; 1 when absent. */
  units?(input: z.output<Input>): number;
  handler(input: z.output<Input>, context: CapabilityContext): Promise<z.output<Output>>;
};

/**
 * Checks a capability's static parts once (name, description, pricing) and returns it unchanged, with
 * its types inferred from the schemas.
 *
 * @example
 * export const echo = defineCapability({
 *   name: "echo", description: "Returns its text.", input: z.object({ text: z.string() }),
 *   output: z.object({ text: z.string() }), pricing: [{ type: "one-time", price: "0.001" }],
 *   handler: async ({ text }) => ({ text }),
 * });
 */
export function defineCapability<Input extends CapabilityInputSchemaType, Output extends z.ZodType>(
  capability: Capability<Input, Output>,
): Capability<Input, Output> {
  CapabilityNameSchema.parse(capability.name);
  z.string().min(1).max(2000).parse(capability.description);
  z.array(CapabilityPricingSchema).min(1).parse(capability.pricing);
  return capability;
}

/** Duck-typed, so a capability built with another copy of zod still qualifies. */
function isSchema(value: unknown): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as { safeParse?: unknown }).safeParse === "function"
  );
}

/** Whether `value` has the capability shape (used when loading one from a module by name). */
export function isCapability(value: unknown): value is Capability {
  if (typeof value !== "object" || value === null) return false;
  const candidate = value as Record<string, unknown>;
  return (
    typeof candidate.name === "string" &&
    typeof candidate.description === "string" &&
    isSchema(candidate.input) &&
    isSchema(candidate.output) &&
    Array.isArray(candidate.pricing) &&
    typeof candidate.handler === "function"
  );
}
