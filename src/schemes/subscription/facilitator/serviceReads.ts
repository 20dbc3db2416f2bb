/**
 * What the relayed subscription API (subscriptionService.ts) shares, and its reads of the chain: plans,
 * subscriptions, nonces and token state, each refusal mapped to a precise code (managerErrors.ts);
 * the simulation of a relayed call; and the index brought up to date after one.
 */
import type { Logger } from "pino";
import { type Address, getAddress } from "viem";
import type { RelayedCall } from "../../../chain/actions/relayedCall.ts";
import { getPlan } from "../../../chain/actions/subscriptions/getPlan.ts";
import { getSubscription } from "../../../chain/actions/subscriptions/getSubscription.ts";
import { getSubscriptionNonce } from "../../../chain/actions/subscriptions/getSubscriptionNonce.ts";
import { getSubscriptionSpend } from "../../../chain/actions/subscriptions/getSubscriptionSpend.ts";
import { getPermitNonce } from "../../../chain/actions/usd/getPermitNonce.ts";
import { getTokenAllowance } from "../../../chain/actions/usd/getTokenAllowance.ts";
import { getTokenBalance } from "../../../chain/actions/usd/getTokenBalance.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { SubscriberInfo, SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import { toManagerError } from "./managerErrors.ts";
import type { SubscriptionIndexer } from "./subscriptionIndexerTypes.ts";
import {
  type ChainPlan,
  type ChainSubscription,
  chainPlanToRow,
  findSubscription,
  type IndexScope,
  type PlanRow,
  statusOf,
  subscriptionsOf,
  subscriptionToWire,
} from "./subscriptionRecords.ts";

export type ServiceContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "gas" | "chainId" | "subscriptionManager" | "logger" | "clock" | "tokens"
>;

/** One service's deployment and settings. */
export type ServiceDeps = {
  ctx: ServiceContext;
  client: ServiceContext["publicClient"];
  manager: Address;
  scope: IndexScope;
  log: Logger;
  indexer: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
  maxRelaysPerHour: number;
  /** The tokens this facilitator serves, lowercased (the keeper's list). */
  servedTokens: ReadonlySet<string>;
};

/** Refuses to pay gas for a plan in a token this facilitator does not serve (the keeper's list). */
export function assertServedToken(deps: ServiceDeps, plan: PlanRow): void {
  if (deps.servedTokens.has(plan.token.toLowerCase())) return;
  throw new TollgateError(
    "UnsupportedToken",
    "this facilitator does not relay subscriptions to plans in that token (see GET /supported)",
    { details: { planId: plan.plan_id.toString(), token: getAddress(plan.token) } },
  );
}

/** Runs a chain read, its refusal mapped to a precise code. */
export async function read<T>(call: () => Promise<unknown>): Promise<T> {
  try {
    return (await call()) as T;
  } catch (error) {
    throw toManagerError(error);
  }
}

export async function chainTime(deps: ServiceDeps): Promise<number> {
  const block = await read<{ timestamp: bigint }>(() => deps.client.getBlock({ blockTag: "latest" }));
  return Number(block.timestamp);
}

export async function readPlan(deps: ServiceDeps, planId: bigint): Promise<PlanRow> {
  const plan = await read<ChainPlan>(() => getPlan(deps.client, { manager: deps.manager, planId }));
  if (/^0x0{40}$/i.test(plan.provider))
    throw new TollgateError("NotFound", "no such plan", { details: { planId: planId.toString() } });
  return chainPlanToRow(planId, plan);
}

export async function readSubscription(
  deps: ServiceDeps,
  subscriptionId: bigint,
): Promise<ChainSubscription> {
  const sub = await read<ChainSubscription>(() =>
    getSubscription(deps.client, { manager: deps.manager, subscriptionId }),
  );
  if (statusOf(sub.status) === undefined) {
    throw new TollgateError("NotFound", "no such subscription", {
      details: { subscriptionId: subscriptionId.toString() },
    });
  }
  return sub;
}

export async function subscriptionInfo(deps: ServiceDeps, subscriptionId: bigint): Promise<SubscriptionInfo> {
  const { client, manager } = deps;
  const [sub, now, spend, indexed] = await Promise.all([
    readSubscription(deps, subscriptionId),
    chainTime(deps),
    // A manager deployed before spend limits has no spendOf: the answer then leaves them out.
    getSubscriptionSpend(client, { manager, subscriptionId }).catch(() => undefined),
    // The chain keeps no reason for a failed renewal; the index does (from RenewalFailed).
    findSubscription(deps.ctx.store, deps.scope, subscriptionId),
  ]);
  const plan = await readPlan(deps, sub.planId);
  return subscriptionToWire(subscriptionId, { ...sub, ...spend }, plan, now, indexed);
}

export function intentNonce(deps: ServiceDeps, subscriber: Address): Promise<bigint> {
  return read<bigint>(() => getSubscriptionNonce(deps.client, { manager: deps.manager, subscriber }));
}

export function tokenRead(
  deps: ServiceDeps,
  token: Address,
  functionName: "balanceOf" | "nonces",
  owner: Address,
): Promise<bigint>;
export function tokenRead(
  deps: ServiceDeps,
  token: Address,
  functionName: "allowance",
  owner: Address,
  spender: Address,
): Promise<bigint>;
export function tokenRead(
  deps: ServiceDeps,
  token: Address,
  functionName: "balanceOf" | "nonces" | "allowance",
  owner: Address,
  spender?: Address,
): Promise<bigint> {
  const { client } = deps;
  return read<bigint>(() =>
    functionName === "balanceOf"
      ? getTokenBalance(client, { token, owner })
      : functionName === "nonces"
        ? getPermitNonce(client, { token, owner })
        : getTokenAllowance(client, { token, owner, spender: spender! }),
  );
}

export async function simulate(deps: ServiceDeps, call: RelayedCall): Promise<void> {
  await read(() =>
    deps.client.simulateContract({ ...call.simulation, account: deps.ctx.gas.address } as never),
  );
}

/** Brings the index up to date after a relayed call, so reads right after it see the change. */
export async function catchUp(deps: ServiceDeps): Promise<void> {
  try {
    await deps.indexer?.syncOnce();
  } catch (error) {
    deps.log.warn({ err: error }, "index sync after a relayed call failed; the background loop will retry");
  }
}

/** What a payer needs to sign its next call: its intent nonce, the chain's time, its subscriptions, a token's state. */
export async function subscriberInfo(
  deps: ServiceDeps,
  subscriber: Address,
  token: Address | undefined,
): Promise<SubscriberInfo> {
  const { manager } = deps;
  const [nonce, now, rows] = await Promise.all([
    intentNonce(deps, subscriber),
    chainTime(deps),
    subscriptionsOf(deps.ctx.store, deps.scope, subscriber),
  ]);
  const tokenInfo =
    token === undefined
      ? undefined
      : await Promise.all([
          tokenRead(deps, token, "nonces", subscriber),
          tokenRead(deps, token, "allowance", subscriber, manager),
          tokenRead(deps, token, "balanceOf", subscriber),
        ]).then(([permitNonce, allowance, balance]) => ({
          address: token,
          permitNonce: permitNonce.toString(),
          allowance: allowance.toString(),
          balance: balance.toString(),
        }));
  return {
    subscriber,
    intentNonce: nonce.toString(),
    chainTime: now,
    manager,
    ...(tokenInfo === undefined ? {} : { token: tokenInfo }),
    subscriptions: rows.map((row) => ({
      subscriptionId: row.subscription_id.toString(),
      planId: row.plan_id.toString(),
      provider: getAddress(row.provider),
      status: row.status,
      currentPeriodEnd: row.current_period_end,
    })),
  };
}
