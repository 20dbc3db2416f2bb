/**
 * What every part of a subscription keeper shares: the agent, its payer, budget and store, the clock,
 * the logger, the facilitator and chain lookups, and the wallet's turn.
 */
import type { BudgetLedger } from "../../../agent/budget/createBudgetLedger.ts";
import { type Clock, systemClock } from "../../../protocol/clock.ts";
import type { Store } from "../../../store/store.ts";
import { type AgentSubscriptionRecord, listLiveSubscriptions } from "./agentSubscriptionRecords.ts";
import { createKeeperLookups, type KeeperLookups } from "./keeperLookups.ts";
import type { KeeperPayer, SubscriptionKeeperOptions } from "./subscriptionKeeperTypes.ts";
import { walletTurn } from "./walletTurns.ts";

export type KeeperContext = KeeperLookups & {
  readonly agent: string;
  readonly payer: KeeperPayer;
  readonly budget: BudgetLedger;
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: SubscriptionKeeperOptions["logger"];
  now(): Date;
  /** The wallet's signed actions, one at a time across keepers and processes sharing the store (walletTurns.ts). */
  inTurn<T>(task: () => Promise<T>): Promise<T>;
  /** The agent's live stored subscription with this on-chain id, if any. */
  find(subscriptionId: bigint): Promise<AgentSubscriptionRecord | undefined>;
};

export function createKeeperContext(options: SubscriptionKeeperOptions): KeeperContext {
  const { agent, payer, budget } = options;
  const store = options.store ?? budget.store;
  const clock = options.clock ?? systemClock;
  return {
    ...createKeeperLookups(payer, options.chain),
    agent,
    payer,
    budget,
    store,
    clock,
    logger: options.logger,
    now: () => new Date(clock.now()),
    inTurn: (task) =>
      walletTurn(`${payer.network}:${payer.address}`, task, { store, holder: options.turnHolder }),
    find: async (subscriptionId) =>
      (await listLiveSubscriptions(store, agent)).find((r) => r.subscriptionId === subscriptionId),
  };
}
