/**
 * What `POST /usage` checks of a provider before it records anything: that each subscription is on
 * one of its plans (from the index, else from the chain) and that the facilitator is its operator on
 * the SubscriptionManager (read from the chain, a confirmed answer trusted for a minute).
 *
 * State: when each provider's confirmed `isOperator` is next read again.
 */
import { type Address, getAddress } from "viem";
import { getIsOperator } from "../../../../chain/actions/subscriptions/getIsOperator.ts";
import { getPlan } from "../../../../chain/actions/subscriptions/getPlan.ts";
import { getSubscription } from "../../../../chain/actions/subscriptions/getSubscription.ts";
import type { FacilitatorContext } from "../../../../facilitator/facilitatorContext.ts";
import { TollgateError } from "../../../../protocol/errors.ts";
import { toManagerError } from "../managerErrors.ts";
import { findSubscription, type IndexScope } from "../subscriptionRecords.ts";

type CheckContext = Pick<FacilitatorContext, "store" | "publicClient" | "gas" | "clock"> & {
  subscriptionManager: Address;
};

/** How long a confirmed `isOperator` is trusted before it is read again. */
const OPERATOR_CACHE_MS = 60_000;

/** Reads the chain, a SubscriptionManager's revert becoming its Tollgate error. */
export async function readChain<T>(call: () => Promise<unknown>): Promise<T> {
  try {
    return (await call()) as T;
  } catch (error) {
    throw toManagerError(error);
  }
}

export type UsageProviderChecks = ReturnType<typeof createUsageProviderChecks>;

export function createUsageProviderChecks(ctx: CheckContext, scope: IndexScope) {
  const operatorUntil = new Map<string, number>();
  return {
    /** Throws unless the facilitator is the provider's operator. */
    async assertOperator(provider: Address): Promise<void> {
      const key = provider.toLowerCase();
      if ((operatorUntil.get(key) ?? 0) > ctx.clock.now()) return;
      const ok = await readChain<boolean>(() =>
        getIsOperator(ctx.publicClient, {
          manager: ctx.subscriptionManager,
          provider,
          operator: ctx.gas.address,
        }),
      );
      if (!ok) {
        throw new TollgateError(
          "InvalidRequest",
          `the facilitator cannot deduct on your plans: call setOperator(${ctx.gas.address}, true) on the SubscriptionManager first`,
          { details: { reason: "facilitator_not_operator", operator: ctx.gas.address, provider } },
        );
      }
      operatorUntil.set(key, ctx.clock.now() + OPERATOR_CACHE_MS);
    },
    /** The provider of a subscription's plan (undefined: no such subscription). */
    providerOf: (subscriptionId: bigint) => providerOf(ctx, scope, subscriptionId),
  };
}

/** The provider of a subscription's plan: from the index, else from the chain. */
async function providerOf(
  ctx: CheckContext,
  scope: IndexScope,
  subscriptionId: bigint,
): Promise<Address | undefined> {
  const row = await findSubscription(ctx.store, scope, subscriptionId);
  if (row !== undefined) return getAddress(row.provider);
  const sub = await readChain<{ subscriber: Address; planId: bigint }>(() =>
    getSubscription(ctx.publicClient, { manager: ctx.subscriptionManager, subscriptionId }),
  );
  if (/^0x0{40}$/i.test(sub.subscriber)) return undefined;
  const plan = await readChain<{ provider: Address }>(() =>
    getPlan(ctx.publicClient, { manager: ctx.subscriptionManager, planId: sub.planId }),
  );
  return getAddress(plan.provider);
}
