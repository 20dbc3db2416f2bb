/**
 * The 402 body (docs/protocol.md, "402 body"): one `accepts` entry per pricing entry of the gate, with Tollgate's
 * subscription terms in the `tollgate` extension property.
 */
import { z } from "zod";
import { AddressSchema } from "./address.ts";
import { AtomicAmountSchema, UintStringSchema } from "./amount.ts";
import { GateErrorCodeSchema } from "./errors.ts";
import { MemoSchema } from "./memo.ts";
import { NetworkSchema } from "./network.ts";

/** The payment schemes of a facilitator's `/supported` list. */
export const PaymentSchemeSchema = z.enum(["exact", "subscription"]);
export type PaymentScheme = z.infer<typeof PaymentSchemeSchema>;

/**
 * The scheme of a 402 option: a registered scheme's id (`exact`, `subscription`, `channel`, …). A
 * client pays only the schemes it has a part for (`src/schemes`) and skips the others.
 */
export const OptionSchemeSchema = z.string().regex(/^[a-z][a-zA-Z0-9-]{0,31}$/);

/**
 * Scheme-specific terms of an option: JSON of at most about 4 KiB and 16 levels. Measured without
 * recursion, so hostile nesting is refused instead of overflowing the stack.
 */
export const OptionExtraSchema = z
  .record(z.string().max(64), z.unknown())
  .refine((extra) => isSmallJson(extra, 4096, 16), {
    error: "extra is at most 4 KiB of JSON, 16 levels deep",
  });

/** Whether `value` is JSON data whose text is at most about `maxChars` long and `maxDepth` deep. */
function isSmallJson(value: unknown, maxChars: number, maxDepth: number): boolean {
  const pending: { value: unknown; depth: number }[] = [{ value, depth: 0 }];
  let size = 0;
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const { value: item, depth } = next;
    if (depth > maxDepth) return false;
    if (item === null || typeof item === "boolean" || typeof item === "number") size += 8;
    else if (typeof item === "string") size += item.length + 2;
    else if (Array.isArray(item)) {
      size += 2 + item.length;
      for (const element of item) pending.push({ value: element, depth: depth + 1 });
    } else if (typeof item === "object") {
      for (const [key, element] of Object.entries(item)) {
        size += key.length + 4;
        pending.push({ value: element, depth: depth + 1 });
      }
      size += 2;
    } else return false;
    if (size > maxChars) return false;
  }
  return true;
}

/** An on-chain plan id: a canonical decimal uint256, as `SubscriptionManager` numbers plans. */
export const PlanIdSchema = UintStringSchema;

/** An http(s) URL, e.g. a facilitator's base URL. */
export const HttpUrlSchema = z.url({ protocol: /^https?$/, error: "expected an http(s) URL" }).max(2048);

/** Metered use beyond the plan's included units: price per unit and units included per period. */
export const OverageSchema = z.object({
  unitPrice: AtomicAmountSchema,
  includedUnits: z.int().nonnegative(),
});
export type Overage = z.infer<typeof OverageSchema>;

/** The `tollgate` extension property of a 402 option; clients that do not know it pay once. */
export const TollgateExtensionSchema = z.object({
  /** The plan this gate sells; on an `exact` option it advertises that a subscription exists. */
  planId: PlanIdSchema.optional(),
  /** Plan period in whole seconds (subscription options). */
  interval: z.int().positive().optional(),
  /** Whether the gate also accepts subscriptions (so a client may compare the two). */
  subscriptionScheme: z.boolean(),
  /** Base URL of the facilitator that settles for this gate. */
  facilitator: HttpUrlSchema,
  /** `SubscriptionManager` contract address (subscription options). */
  manager: AddressSchema.optional(),
  /** Metered terms, when the plan includes an allowance. */
  overage: OverageSchema.optional(),
  /** Set when `planId` is deprecated: the plan new subscribers should take instead. */
  successorPlanId: PlanIdSchema.optional(),
});
export type TollgateExtension = z.infer<typeof TollgateExtensionSchema>;

/**
 * One way to pay. `amount` is the one-time price (`exact`) or the price per period (`subscription`).
 * A `subscription` option must carry `tollgate.planId`, `tollgate.interval` and `tollgate.manager`.
 */
export const PaymentOptionSchema = z
  .object({
    scheme: OptionSchemeSchema,
    network: NetworkSchema,
    token: AddressSchema,
    amount: AtomicAmountSchema,
    payTo: AddressSchema,
    memo: MemoSchema,
    tollgate: TollgateExtensionSchema.optional(),
    /** Terms of the option's scheme beyond the common ones (absent for `exact` and `subscription`). */
    extra: OptionExtraSchema.optional(),
    /** The resource this option pays for (absolute URL or path), for display and logs. */
    resource: z.string().max(2048).optional(),
    description: z.string().max(1024).optional(),
  })
  .superRefine((option, ctx) => {
    if (option.scheme !== "subscription") return;
    for (const key of ["planId", "interval", "manager"] as const) {
      if (option.tollgate?.[key] === undefined) {
        ctx.addIssue({
          code: "custom",
          message: `a subscription option needs tollgate.${key}`,
          path: ["tollgate", key],
        });
      }
    }
  });
export type PaymentOption = z.infer<typeof PaymentOptionSchema>;

/** The 402 response body: freshly built for every 402 (docs/protocol.md, "402 body"). */
export const PaymentRequiredSchema = z.object({
  version: z.literal("1"),
  /** Why payment is required: one of the gate codes (docs/protocol.md, "Errors"). */
  error: GateErrorCodeSchema,
  /** For people; clients branch on `error`. */
  message: z.string().max(1024),
  accepts: z.array(PaymentOptionSchema).min(1).max(32),
});
export type PaymentRequired = z.infer<typeof PaymentRequiredSchema>;

/** A subscription plan's terms, gathered from a subscription option (or a discovery manifest). */
export const PlanTermsSchema = z.object({
  planId: PlanIdSchema,
  /** Price per period, smallest unit. */
  amount: AtomicAmountSchema,
  /** Period in whole seconds. */
  interval: z.int().positive(),
  token: AddressSchema,
  /** Units included per period (0 for a plan without metering). */
  includedUnits: z.int().nonnegative(),
  /** Price per unit beyond the included ones, smallest unit ("0" for none). */
  overageUnitPrice: AtomicAmountSchema,
  payTo: AddressSchema,
  network: NetworkSchema,
  manager: AddressSchema,
});
export type PlanTerms = z.infer<typeof PlanTermsSchema>;

/**
 * The plan terms of a subscription option; `undefined` for an `exact` option or one lacking plan
 * fields (which `PaymentOptionSchema` refuses for subscription options).
 */
export function planTermsOf(option: PaymentOption): PlanTerms | undefined {
  const ext = option.tollgate;
  if (option.scheme !== "subscription" || ext === undefined) return undefined;
  const { planId, interval, manager } = ext;
  if (planId === undefined || interval === undefined || manager === undefined) return undefined;
  return {
    planId,
    amount: option.amount,
    interval,
    token: option.token,
    includedUnits: ext.overage?.includedUnits ?? 0,
    overageUnitPrice: ext.overage?.unitPrice ?? "0",
    payTo: option.payTo,
    network: option.network,
    manager,
  };
}
