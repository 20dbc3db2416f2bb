/** The public shapes of an agent's subscription keeper (createSubscriptionKeeper.ts). */
import type { Address } from "viem";
import type { BudgetLedger } from "../../../agent/budget/createBudgetLedger.ts";
import type { ReadClient } from "../../../chain/clientTypes.ts";
import type { Payer } from "../../../client/createPayer.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { Store } from "../../../store/store.ts";
import type { AgentSubscriptionRecord } from "./agentSubscriptionRecords.ts";
import type { SubscriptionEventReader } from "./readSubscriptionPulls.ts";

/** What the keeper needs of a payer (`account` signs the approval top-ups; without it none is made). */
export type KeeperPayer = Pick<
  Payer,
  "address" | "network" | "facilitator" | "subscribe" | "pause" | "cancel" | "setMaxOverage" | "account"
> &
  Partial<Pick<Payer, "payment" | "setSpendLimit">>;

export type SubscriptionAlert = {
  agent: string;
  subscriptionId: bigint;
  planId: string;
  provider: string;
  action: "paused" | "cancelled" | "ended";
  reason: string;
  /** What the seller took beyond the subscription's hold (0 for an ending that cost nothing extra). */
  beyondHold: bigint;
};

export type SubscriptionKeeperOptions = {
  agent: string;
  payer: KeeperPayer;
  budget: BudgetLedger;
  /** Default: the ledger's store. */
  store?: Store | undefined;
  clock?: Clock | undefined;
  /**
   * Reads the SubscriptionManager's events; without it `sync()` cannot see renewals or deductions. A
   * client that can also `readContract` (a viem `PublicClient`) reads pending x402 payments back too.
   */
  chain?: (SubscriptionEventReader & Partial<ReadClient>) | undefined;
  logger?: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void } | undefined;
  /** Waits between looks at another process's claim. Default: a timer. */
  wait?: ((ms: number) => Promise<void>) | undefined;
  /** A claim older than this without a subscription is taken to be a dead process's (default 180 s). */
  claimStaleAfterMs?: number | undefined;
  /** Told when a subscription is paused, cancelled or ended by the keeper. */
  onAlert?: ((alert: SubscriptionAlert) => void) | undefined;
  createId?: (() => string) | undefined;
  /**
   * The name this keeper takes the wallet's turns under in the store (walletTurns.ts). Default: one
   * per process, so the keepers of a process share turns in memory and processes take them in the store.
   */
  turnHolder?: string | undefined;
  /**
   * The shortest plan interval accepted, in seconds: how often the keeper looks (`watchSubscriptions`'
   * interval). Default 60, the watcher's default.
   */
  minIntervalSeconds?: number | undefined;
};

export type EnsureRequest = {
  planId: string;
  /** The overage cap the caller would like (room for its forecast); the budget may grant less. */
  desiredCap?: bigint | undefined;
  /**
   * Whom the budget charges (its per-provider limit): the seller's identity as the caller knows it.
   * Default: the plan's provider on chain.
   */
  provider?: Address | undefined;
};

export type EnsuredSubscription = {
  subscriptionId: bigint;
  /** True when this call subscribed (the first period was charged). */
  created: boolean;
  record: AgentSubscriptionRecord;
};

export type SyncedSubscription = {
  subscriptionId: bigint;
  planId: string;
  /** Everything the chain has pulled for it. */
  pulled: bigint;
  /** Newly recorded in the ledger by this sync. */
  recorded: bigint;
  beyondHold: bigint;
  action: "none" | "paused" | "cancelled" | "ended";
};

export type SubscriptionKeeper = {
  ensure(request: EnsureRequest): Promise<EnsuredSubscription>;
  /** Records what the chain pulled for each of the agent's subscriptions; pauses those beyond their hold. */
  sync(): Promise<SyncedSubscription[]>;
  /** The stored subscription with this on-chain id (of this agent), if any. */
  find(subscriptionId: bigint): Promise<AgentSubscriptionRecord | undefined>;
  /** Records metered use as it happens (the gate deducts the same on chain later), from the hold. */
  chargeUsage(subscriptionId: bigint, amount: bigint): Promise<boolean>;
  /**
   * Raises the overage cap of an Active subscription by up to `max(includedUnits, 10)` units' worth,
   * holding the raise in the budget first (a cap granted but not used is already held, so the room
   * left is free room). Resolves false when there is no room for one unit: the gate's refusal stands.
   * The raise is held first, then added to the token approval (a relayed permit for the allowance
   * plus the raise), so it does not take from the approval held for the next renewal. If the permit
   * cannot be relayed the raise still stands and takes from that approval (the renewal then fails
   * sooner rather than overspend).
   */
  raiseCap(
    subscriptionId: bigint,
    plan: { overageUnitPrice: bigint; includedUnits: number },
  ): Promise<{ maxOverage: bigint } | undefined>;
  /** Cancels a subscription (relayed) and ends its hold; says why in the log and the alert. */
  cancel(subscriptionId: bigint, reason: string): Promise<void>;
};
