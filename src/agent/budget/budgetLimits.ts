/**
 * What an agent may spend (docs/budgets.md): the limits, the kinds of spend, and agent names. Amounts are
 * `bigint` in the token's smallest unit (USDC: 6 decimals).
 */
import { type Address, getAddress } from "viem";
import { z } from "zod";

/**
 * An agent's name in the ledger: 1–128 letters, digits and `. _ : @ -`, starting with a letter or
 * digit (so it is safe in a shell command and a log line). An address works too.
 */
export const AgentIdSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/, {
  error: "an agent name is 1-128 letters, digits or . _ : @ -, starting with a letter or digit",
});
export type AgentId = z.infer<typeof AgentIdSchema>;

/** How a spend pays: a one-time payment, a subscription period, or metered use (allowance overage). */
export const SpendKindSchema = z.enum(["one-time", "subscription", "metered"]);
export type SpendKind = z.infer<typeof SpendKindSchema>;

export const SpendKinds = SpendKindSchema.options;

/** A non-negative amount in the token's smallest unit. */
export const BudgetAmountSchema = z.bigint().nonnegative();

const ADDRESS_PATTERN = /^0x[0-9a-fA-F]{40}$/;

/** Provider address → limit; keys in any case, normalized to EIP-55. Two spellings of one address are refused. */
const PerProviderSchema = z.record(z.string(), BudgetAmountSchema).transform((record, ctx) => {
  const normalized: Record<Address, bigint> = {};
  for (const [key, limit] of Object.entries(record)) {
    if (!ADDRESS_PATTERN.test(key)) {
      ctx.addIssue({ code: "custom", message: `not a provider address: ${key}`, path: [key] });
      return z.NEVER;
    }
    const address = getAddress(key.toLowerCase());
    if (address in normalized) {
      ctx.addIssue({ code: "custom", message: `provider ${address} is listed twice`, path: [key] });
      return z.NEVER;
    }
    normalized[address] = limit;
  }
  return normalized;
});

/**
 * An agent's limits. Each is optional: a limit left out does not apply.
 * - `total`: everything the agent ever spends.
 * - `daily`: spends authorized in the last 24 hours (a rolling window, by the ledger's clock).
 * - `perCall`: a single one-time or metered spend (subscriptions are bounded by the next limit instead).
 * - `perProvider`: everything spent with one provider (payee address).
 * - `maxSubscriptionCommitment`: the sum of the period prices of the agent's active subscriptions.
 */
export const BudgetLimitsSchema = z.strictObject({
  total: BudgetAmountSchema.optional(),
  daily: BudgetAmountSchema.optional(),
  perCall: BudgetAmountSchema.optional(),
  perProvider: PerProviderSchema.optional(),
  maxSubscriptionCommitment: BudgetAmountSchema.optional(),
});
export type BudgetLimits = z.output<typeof BudgetLimitsSchema>;
export type BudgetLimitsInput = z.input<typeof BudgetLimitsSchema>;

/** The names of the limits, as `BudgetExceeded` details report them. */
export type BudgetLimitName = "total" | "daily" | "perCall" | "perProvider" | "maxSubscriptionCommitment";
