/**
 * What the subscription scheme adds to a payer made by `createPayer` (docs/client.md): subscribing to
 * a plan, the sub-auth headers a subscribed request carries, the relayed changes of a subscription
 * (pause, resume, cancel, overage and spend limits) and the book of subscriptions held.
 */
import { parseTokenAmount, type TokenAmountInput } from "../../../client/parseTokenAmount.ts";
import type { PayerContext, PayerSubscriptions } from "../../../client/payerTypes.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import { changeSubscriptionThroughFacilitator } from "./facilitatorSubscriptions.ts";
import { type SubscribeToPlanOptions, subscribeToPlan } from "./subscribeToPlan.ts";
import { createSubscriptionAuth, type SubscriptionAuth } from "./subscriptionAuth.ts";
import { createSubscriptionBook } from "./subscriptionBook.ts";

export type SubscriptionPayerMethods = {
  /**
   * Subscribes to a plan — gasless through the facilitator, or `{ direct: true }` from `walletClient` —
   * and returns the subscription id. The first period is charged at once. Throws `TollgateError`:
   * `PlanDeprecated` (with `details.successorPlanId`), `InsufficientFunds`, `NotFound`, …
   */
  subscribe(options: SubscribeToPlanOptions): Promise<bigint>;
  /**
   * `X-Tollgate-Sub` and `X-Tollgate-Sub-Auth` for a request to the gate at `audienceOrigin`: a token
   * signed by this payer, minted once and reused until five minutes before it expires.
   */
  subscriptionHeaders(
    subscriptionId: bigint | string,
    audienceOrigin: string,
  ): Promise<Record<string, string>>;
  /** Pauses a subscription (relayed; the paid time left is kept). Returns its state after. */
  pause(subscriptionId: bigint | string): Promise<SubscriptionInfo>;
  /** Resumes a paused subscription (relayed; charges a period if one came due). */
  resume(subscriptionId: bigint | string): Promise<SubscriptionInfo>;
  /** Cancels a subscription (relayed; final, no refund). */
  cancel(subscriptionId: bigint | string): Promise<SubscriptionInfo>;
  /** Sets the most overage deducted per period (token units as a number or text, or a bigint of smallest units), relayed. */
  setMaxOverage(subscriptionId: bigint | string, maxOverage: TokenAmountInput): Promise<SubscriptionInfo>;
  /** Sets the most ever pulled for a subscription in total (relayed; same units as `setMaxOverage`). */
  setSpendLimit(subscriptionId: bigint | string, spendLimit: TokenAmountInput): Promise<SubscriptionInfo>;
  readonly subscriptions: PayerSubscriptions;
};

/** What `fetchWithPayment` uses of a payer's subscription methods, when it has them. */
export type SubscribingPayer = Partial<
  Pick<SubscriptionPayerMethods, "subscribe" | "subscriptionHeaders" | "subscriptions">
>;

type Change =
  | { action: "pause" | "resume" | "cancel" }
  | { action: "overage"; maxOverage: bigint }
  | { action: "limit"; spendLimit: bigint };

/** The subscription methods of one payer; its sub-auth signer is made at the first token. */
export function createSubscriptionPayerMethods(context: PayerContext): SubscriptionPayerMethods {
  const { account, facilitator } = context;
  const subscriptions = createSubscriptionBook();
  const auth = lazySubscriptionAuth(context);
  const change = async (subscriptionId: bigint | string, p: Change): Promise<SubscriptionInfo> => {
    const reply = await changeSubscriptionThroughFacilitator(facilitator, account, {
      subscriptionId: subscriptionIdOf(subscriptionId),
      ...p,
    });
    return reply.subscription;
  };
  return {
    subscriptions,
    async subscribe(subscribeOptions) {
      const result = await subscribeToPlan(
        { signer: account, network: context.network, facilitator, walletClient: context.walletClient },
        subscribeOptions,
      );
      subscriptions.remember({ planId: result.planId, subscriptionId: result.subscriptionId });
      return result.subscriptionId;
    },
    // Async throughout, so a bad argument is a rejected promise like every other failure.
    subscriptionHeaders: async (subscriptionId, audienceOrigin) =>
      auth().headers(subscriptionIdOf(subscriptionId), audienceOrigin),
    pause: (subscriptionId) => change(subscriptionId, { action: "pause" }),
    resume: (subscriptionId) => change(subscriptionId, { action: "resume" }),
    async cancel(subscriptionId) {
      const info = await change(subscriptionId, { action: "cancel" });
      subscriptions.forget(subscriptionIdOf(subscriptionId));
      return info;
    },
    setMaxOverage: async (subscriptionId, maxOverage) =>
      change(subscriptionId, { action: "overage", maxOverage: parseTokenAmount(maxOverage, "maxOverage") }),
    setSpendLimit: async (subscriptionId, spendLimit) =>
      change(subscriptionId, { action: "limit", spendLimit: parseTokenAmount(spendLimit, "spendLimit") }),
  };
}

/** The payer's sub-auth tokens, made at the first use: an account without `signMessage` fails then. */
function lazySubscriptionAuth(context: PayerContext): () => SubscriptionAuth {
  let subAuth: SubscriptionAuth | undefined;
  return () => {
    const { account } = context;
    const { signMessage } = account;
    if (signMessage === undefined) {
      throw new TollgateError(
        "InvalidRequest",
        "sub-auth tokens need an account that can signMessage (EIP-191)",
      );
    }
    subAuth ??= createSubscriptionAuth({
      signer: { address: account.address, signMessage: (args) => signMessage.call(account, args) },
      clock: context.clock,
    });
    return subAuth;
  };
}

function subscriptionIdOf(subscriptionId: bigint | string): bigint {
  const text = String(subscriptionId);
  if (!/^(0|[1-9][0-9]{0,77})$/.test(text)) {
    throw new TollgateError("InvalidRequest", "a subscription id is a decimal integer", {
      details: { subscriptionId: text },
    });
  }
  return BigInt(text);
}
