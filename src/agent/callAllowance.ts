/**
 * A call allowance: the most a chain of paid tool calls made to serve one sale may spend. A reseller
 * (a specialist that buys from suppliers to serve a call, agents/createBriefReseller.ts) opens one per
 * payment it receives, sized by what that payment earned, and passes it to every supplier purchase
 * through LangChain's config (`withCallAllowance`). `paidTool` holds each payment against it before
 * reserving it in the budget, and gives back what was not spent, so the supplier spend for a sale
 * never exceeds what the sale earned — even with purchases running at once, since `take` is
 * synchronous and checks and holds in one step.
 *
 * Invariant: `spent() + held ≤ limit` at every moment, where held is what `take` granted and neither
 * `give` nor `spend` has settled yet.
 */
import type { RunnableConfig } from "@langchain/core/runnables";
import { formatUnitsExact } from "../protocol/amount.ts";
import { TollgateError } from "../protocol/errors.ts";

export type CallAllowance = {
  /** What the sale earned: the most its purchases may spend, in the token's smallest unit. */
  readonly limit: bigint;
  /** What is neither spent nor held. */
  remaining(): bigint;
  /** What purchases have spent (settled). */
  spent(): bigint;
  /** Holds `amount` if it fits; false (holding nothing) when it would pass the limit. */
  take(amount: bigint): boolean;
  /**
   * Settles a hold of `held`: `paid` of it was spent, the rest is given back. A `paid` above `held`
   * (money that moved without a hold) is recorded anyway, so `spent()` never hides money.
   */
  settle(held: bigint, paid: bigint): void;
  /**
   * The sale reservation in the spender's budget that funds this allowance (a reseller's admitted sale,
   * src/agent/saleAdmission.ts): purchases reserve within it, so what was admitted can be spent —
   * within the part set aside for their supplier (`bySupplier`, by lowercase address) when there is one.
   */
  readonly funding?: { id: string; bySupplier?: Readonly<Record<string, string>> | undefined } | undefined;
};

export function createCallAllowance(limit: bigint): CallAllowance {
  if (limit < 0n) throw new TollgateError("InvalidRequest", "a call allowance cannot be negative");
  let spent = 0n;
  let held = 0n;
  return {
    limit,
    remaining: () => {
      const left = limit - spent - held;
      return left > 0n ? left : 0n;
    },
    spent: () => spent,
    take(amount) {
      if (amount < 0n || spent + held + amount > limit) return false;
      held += amount;
      return true;
    },
    settle(hold, paid) {
      held -= hold < held ? hold : held;
      spent += paid;
    },
  };
}

/** `allowance` with its purchases reserved within `funding` (one serving of an admitted sale). */
export function fundedAllowance(allowance: CallAllowance, funding: CallAllowance["funding"]): CallAllowance {
  if (funding === undefined) return allowance;
  return {
    limit: allowance.limit,
    remaining: () => allowance.remaining(),
    spent: () => allowance.spent(),
    take: (amount) => allowance.take(amount),
    settle: (held, paid) => allowance.settle(held, paid),
    funding: {
      id: funding.id,
      ...(funding.bySupplier === undefined ? {} : { bySupplier: funding.bySupplier }),
    },
  };
}

const CONFIG_KEY = "tollgateCallAllowance";

/** The LangChain config that makes a paid tool spend within `allowance`. */
export function withCallAllowance(allowance: CallAllowance, config: RunnableConfig = {}): RunnableConfig {
  return { ...config, configurable: { ...config.configurable, [CONFIG_KEY]: allowance } };
}

/** The allowance a tool call was given in its config, if any. */
export function callAllowanceOf(config: RunnableConfig | undefined): CallAllowance | undefined {
  const value = config?.configurable?.[CONFIG_KEY] as CallAllowance | undefined;
  return typeof value?.take === "function" ? value : undefined;
}

/** The refusal of a purchase the allowance cannot cover: nothing was reserved or paid. */
export function callAllowanceExceeded(tool: string, allowance: CallAllowance, amount: bigint): TollgateError {
  return new TollgateError(
    "BudgetExceeded",
    `${tool} costs ${formatUnitsExact(amount)} USDC, but this call's allowance (${formatUnitsExact(allowance.limit)} USDC, what the sale it serves earned) has ${formatUnitsExact(allowance.remaining())} USDC left; nothing was paid`,
    {
      details: {
        tool,
        limit: "callAllowance",
        limitAmount: allowance.limit.toString(),
        used: (allowance.limit - allowance.remaining()).toString(),
        requested: amount.toString(),
      },
    },
  );
}
