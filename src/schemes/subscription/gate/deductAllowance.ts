/**
 * The specification's `deductAllowance(amount)` (docs/contracts.md; docs/gate.md): from a handler serving a request
 * under a subscription, charge `amount` (integer smallest units) against that subscription's overage
 * cap for the current cycle. The charge goes through the gate's usage ledger — checked against the cap
 * atomically, counted with metered use, settled on chain in batches through the facilitator's
 * `POST /usage` — so it costs the request no transaction.
 *
 * Which subscription: the one the request was served under. The adapters run the handler inside the
 * request's gate context (an `AsyncLocalStorage` run per request), so the bare call finds it; the same
 * operation is bound on the subscription the handler reads (`c.get("subscription")`,
 * `res.locals.subscription`, the `node:http` handler's fourth argument) as
 * `subscription.deductAllowance(amount)`, and `{ subscription }` may be passed explicitly. The
 * context holds only the current request's subscription: nothing is shared between requests, and
 * outside a subscribed request the call throws `InvalidRequest` saying so.
 */
import { type Amount, amountProblem } from "../../../gate/amount.ts";
import { currentGateContext } from "../../../gate/gateContext.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { AllowanceDeduction, GateSubscription } from "./createSubscriptionGate.ts";

/** The subscription a request was served under, as handlers read it, with its deduction bound. */
export type SubscriptionServed = GateSubscription & {
  /** `deductAllowance(amount)` for this subscription (integer smallest units). */
  deductAllowance(amount: Amount): Promise<AllowanceDeduction>;
};

declare module "../../types.ts" {
  interface SchemeSubscriptions {
    subscription: SubscriptionServed;
  }
}

/**
 * Charges `amount` against the allowance of the subscription the current request was served under.
 * Resolves once the charge is accepted (it is settled on chain later, in a batch). Throws
 * `TollgateError`: `AllowanceExhausted` when it does not fit the cap this cycle (the facilitator is
 * told, and emits `allowance.exhausted`), `InvalidRequest` for an amount that is not a positive
 * integer of smallest units or a call outside a subscribed request, `RateLimited` past the gate's
 * `maxUnsettledUsage`, `SubscriptionNotActive`.
 *
 * @example
 * app.post("/api/render", async (c) => {
 *   await deductAllowance(25_000); // 0.025 USDC for this render, on top of the metered units
 *   return c.json(await render(await c.req.json()));
 * });
 */
export async function deductAllowance(
  amount: Amount,
  options: { subscription?: Pick<SubscriptionServed, "deductAllowance"> | undefined } = {},
): Promise<AllowanceDeduction> {
  const subscription = options?.subscription ?? currentGateContext()?.subscription;
  if (subscription === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      "deductAllowance: this request was not served under a subscription (call it from a handler behind paymentGate on a subscribed request, or pass { subscription })",
      { details: { reason: "no_subscription" } },
    );
  }
  return subscription.deductAllowance(amount);
}

/** A deduction's amount: integer smallest units (number, bigint or integer string), positive. */
export function deductionAmount(amount: unknown): bigint {
  const problem = amountProblem(amount);
  if (problem !== undefined) {
    throw new TollgateError("InvalidRequest", `deductAllowance: ${problem}`, {
      details: { reason: "bad_amount" },
    });
  }
  const value = BigInt(amount as Amount);
  if (value <= 0n || value >= 2n ** 256n) {
    throw new TollgateError(
      "InvalidRequest",
      "deductAllowance: the amount must be a positive number of smallest units",
      {
        details: { reason: "bad_amount" },
      },
    );
  }
  return value;
}
