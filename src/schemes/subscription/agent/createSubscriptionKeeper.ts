/**
 * An agent's subscriptions, kept in its store and inside its budget (docs/budgets.md, "Subscriptions").
 *
 * - `ensure(plan)` returns the wallet's subscription to a plan, subscribing only when none is held:
 *   the store's claim (one live row per wallet and plan) makes a second process, a restart or a second
 *   agent on the same wallet reuse it; a claim left by a process that died between subscribing and
 *   recording is reconciled from the chain (`GET /subscribers/:address`) before anyone subscribes again.
 * - A plan that renews more often than the keeper looks (`minIntervalSeconds`, the watcher's period)
 *   is refused before anything is signed: its renewals would outrun every look.
 * - A subscribe reserves the first period (checked against every limit, the commitment ceiling and the
 *   approval hook), places a standing hold for what the subscription can still take (this period's
 *   overage cap, and the next renewal with its cap when the budget has room: subscriptionCommitment.ts)
 *   and approves the manager for exactly that, plus what the wallet's other subscriptions in the plan's token still hold.
 * - The subscribe signs a spend limit equal to the first period plus the hold: the manager refuses any
 *   pull past it, so the approval the wallet's subscriptions share never pays one subscription out of
 *   another's share. Whenever the hold grows (the next renewal, a cap raise) the limit is raised to
 *   match (a relayed, subscriber-signed SetSpendLimit): on chain, a subscription can take at most what
 *   the budget has committed to it, before any look of the keeper.
 * - `sync()` reads what each subscription has pulled on chain and records it in the ledger from its hold
 *   (idempotently: the ledger keeps the running total per subscription). A subscription that took more
 *   than its hold is paused (relayed, subscriber-signed) and reported; one that was cancelled or whose
 *   renewal failed is ended and its hold released. When a renewal has used the approval, the hold is
 *   grown back to the next renewal and its cap and the approval topped up to match (a relayed permit,
 *   `POST /subscriptions/approval`), so a subscription the budget holds renews period after period.
 *
 * Invariant: for each subscription, chain pulls ≤ spend limit ≤ first period + charged + held (what
 * the budget committed to it), and ledger spend = first period + max(estimates, chain pulls − first
 * period); so nothing moves that the limits did not allow, whenever the keeper looks.
 */
import { randomUUID } from "node:crypto";
import type { Address } from "viem";
import { budgetHeadroom } from "../../../agent/budget/budgetHeadroom.ts";
import type { BudgetReport } from "../../../agent/budget/budgetReport.ts";
import type { BudgetLedger } from "../../../agent/budget/createBudgetLedger.ts";
import { resolvePendingPayments } from "../../../agent/budget/pendingPayments.ts";
import type { ReadClient } from "../../../chain/clientTypes.ts";
import type { Payer } from "../../../client/createPayer.ts";
import { formatUnitsExact } from "../../../protocol/amount.ts";
import { type Clock, systemClock } from "../../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../../protocol/errors.ts";
import type { PlanInfo } from "../../../protocol/subscriptions.ts";
import type { Store } from "../../../store/store.ts";
import {
  approveThroughFacilitator,
  getPlanInfo,
  getSubscriberInfo,
  getSubscriptionInfo,
} from "../client/facilitatorSubscriptions.ts";
import {
  type AgentSubscriptionRecord,
  activateSubscription,
  claimSubscription,
  dropClaim,
  findLiveSubscription,
  holdRefOf,
  listLiveSubscriptions,
  otherHoldsOfWallet,
  renewClaim,
  setSubscriptionStatus,
  setSubscriptionToken,
} from "./agentSubscriptionRecords.ts";
import { readSubscriptionPulls, type SubscriptionEventReader } from "./readSubscriptionPulls.ts";
import { subscriptionCommitment } from "./subscriptionCommitment.ts";
import { walletTurn } from "./walletTurns.ts";

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

const DEFAULT_STALE_MS = 180_000;
const DEFAULT_MIN_INTERVAL_SECONDS = 60;
const CLAIM_POLL_MS = 250;
/** Codes that say the subscribe did not happen (nothing moved on chain). */
const REFUSED = new Set([
  "PlanDeprecated",
  "NotFound",
  "InsufficientFunds",
  "InvalidRequest",
  "InvalidSignature",
  "UnsupportedNetwork",
  "UnsupportedToken",
  "BudgetExceeded",
  "ApprovalDenied",
]);

/**
 * @example
 * const keeper = createSubscriptionKeeper({ agent: "researcher", payer, budget, chain: publicClient });
 * const { subscriptionId } = await keeper.ensure({ planId: "3", desiredCap: 20_000n });
 * await keeper.sync(); // renewals and deductions into the ledger
 */
export function createSubscriptionKeeper(options: SubscriptionKeeperOptions): SubscriptionKeeper {
  const { agent, payer, budget } = options;
  const store = options.store ?? budget.store;
  const clock = options.clock ?? systemClock;
  const wait = options.wait ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const staleMs = options.claimStaleAfterMs ?? DEFAULT_STALE_MS;
  const createId = options.createId ?? randomUUID;
  const minInterval = options.minIntervalSeconds ?? DEFAULT_MIN_INTERVAL_SECONDS;
  const plans = new Map<string, Promise<PlanInfo>>();
  /** Subscribes in flight in this process, by plan: concurrent calls share one. */
  const ensuring = new Map<string, Promise<EnsuredSubscription>>();
  let managerOf: Promise<Address> | undefined;

  const now = () => new Date(clock.now());
  /** The wallet's signed actions, one at a time across keepers and processes sharing the store (walletTurns.ts). */
  const inTurn = <T>(task: () => Promise<T>) =>
    walletTurn(`${payer.network}:${payer.address}`, task, { store, holder: options.turnHolder });
  const planInfo = (planId: string) => {
    let info = plans.get(planId);
    if (info === undefined) {
      info = getPlanInfo(payer.facilitator, planId);
      info.catch(() => plans.delete(planId));
      plans.set(planId, info);
    }
    return info;
  };
  const manager = (): Promise<Address> => {
    managerOf ??= payer.facilitator.supported().then((supported) => {
      const found = supported.networks.find((n) => n.network === payer.network)?.subscriptionManager;
      if (found === undefined) {
        managerOf = undefined;
        throw new TollgateError(
          "UnsupportedNetwork",
          `the facilitator lists no SubscriptionManager on ${payer.network}`,
        );
      }
      return found;
    });
    return managerOf;
  };
  const currentBlock = async () => (options.chain === undefined ? 0n : options.chain.getBlockNumber());

  /** The wallet's live subscription to the plan as the chain has it (Active or Paused), if any. */
  const onChain = async (planId: string): Promise<bigint | undefined> => {
    const info = await getSubscriberInfo(payer.facilitator, payer.address);
    const held = info.subscriptions.find(
      (s) => s.planId === planId && (s.status === "Active" || s.status === "Paused"),
    );
    return held === undefined ? undefined : BigInt(held.subscriptionId);
  };

  /** Takes a subscription found on chain into the store; its pulls from `fromBlock` on go to this agent. */
  const adopt = async (
    claimId: string,
    subscriptionId: bigint,
    fromBlock: bigint,
    provider: Address,
    why: string,
  ) => {
    await budget.hold(agent, { ref: holdRefOf(claimId), provider, amount: 0n });
    await activateSubscription(store, claimId, {
      subscriptionId,
      recordedFirst: 0n,
      fromBlock,
      now: now(),
      note: why,
    });
    options.logger?.info(
      { agent, subscriptionId: subscriptionId.toString(), why },
      "subscription adopted from the chain",
    );
  };

  /** The least room the per-provider, daily and total limits leave: what a hold may take. */
  const holdRoom = (report: BudgetReport, provider: string): bigint | undefined => {
    let room: bigint | undefined;
    for (const h of budgetHeadroom(report, { provider, kind: "metered" })) {
      if (h.limit === "perCall") continue;
      if (room === undefined || h.room < room) room = h.room;
    }
    return room;
  };

  /** Subscribes under a claim this process owns. */
  const subscribeClaimed = async (claimId: string, plan: PlanInfo, desiredCap: bigint, provider: Address) => {
    const ref = holdRefOf(claimId);
    const price = BigInt(plan.amount);
    if (plan.interval < minInterval) {
      throw new TollgateError(
        "BudgetExceeded",
        `plan ${plan.planId} renews every ${plan.interval} s, more often than the budget's keeper looks (every ${minInterval} s)`,
        { details: { agent, planId: plan.planId, provider, interval: plan.interval, minInterval } },
      );
    }
    const report = await budget.report(agent);
    const commitment = subscriptionCommitment({
      price,
      desiredCap,
      overageUnitPrice: BigInt(plan.overageUnitPrice),
      room: holdRoom(report, provider),
    });
    if (commitment === undefined) {
      throw new TollgateError(
        "BudgetExceeded",
        `the budget has no room for plan ${plan.planId}'s first period (${formatUnitsExact(price)} USDC)`,
        { details: { agent, planId: plan.planId, provider, requested: price.toString() } },
      );
    }
    // One approval question for the whole commitment: the first period and the hold placed next.
    const reservation = await budget.reserve(agent, {
      amount: price,
      provider,
      kind: "subscription",
      ref,
      ttlSeconds: 900,
      withHold: commitment.hold,
    });
    try {
      await budget.hold(agent, { ref, provider, amount: commitment.hold });
    } catch (error) {
      await budget.release(reservation);
      throw error;
    }
    // In the wallet's turn from reading the other holds to recording this one as active: the nonces
    // signed and the approval (every hold of the wallet) are not raced by another subscribe.
    const { subscriptionId, approval } = await inTurn(async () => {
      await pauseUnheldBeforeApproval(plan.token, claimId);
      const others = await otherHoldsOfWallet(store, {
        subscriber: payer.address,
        manager: await manager(),
        token: plan.token,
        exceptId: claimId,
      });
      let subscriptionId: bigint;
      try {
        subscriptionId = await payer.subscribe({
          planId: plan.planId,
          maxOverage: commitment.cap,
          // Everything the budget committed to it (the first period and the hold): the manager pulls
          // no more for this subscription, whatever the shared approval allows.
          spendLimit: commitment.approval,
          approval: commitment.approval + others,
          exactApproval: true,
        });
      } catch (error) {
        await budget.release(reservation);
        // Refused: nothing moved. Anything else (a timeout) may hide a subscribe that went through: the
        // claim and its hold stay, and the next `ensure` reconciles them from the chain once stale.
        if (isTollgateError(error) && REFUSED.has(error.code)) {
          await budget.releaseHold(agent, ref);
          await dropClaim(store, claimId);
        }
        throw error;
      }
      await budget.commit(reservation, price);
      await activateSubscription(store, claimId, {
        subscriptionId,
        recordedFirst: price,
        now: now(),
        note: `cap ${formatUnitsExact(commitment.cap)}; ${commitment.renews ? "next renewal held" : "one period held"}`,
      });
      return { subscriptionId, approval: commitment.approval + others };
    });
    options.logger?.info(
      {
        agent,
        planId: plan.planId,
        subscriptionId: subscriptionId.toString(),
        maxOverage: commitment.cap.toString(),
        hold: commitment.hold.toString(),
        approval: approval.toString(),
        renews: commitment.renews,
      },
      "subscribed within the budget",
    );
    return subscriptionId;
  };

  const ensureOnce = async (request: EnsureRequest): Promise<EnsuredSubscription> => {
    const key = { subscriber: payer.address, manager: await manager(), planId: request.planId };
    const deadline = clock.now() + staleMs + 30_000;
    for (;;) {
      const live = await findLiveSubscription(store, key);
      if (live !== undefined && live.subscriptionId !== undefined) {
        // Once per process and plan (the payer's book serves later calls): a subscription cancelled
        // elsewhere (the policy, the seller, another process) or past due is ended, and taken out anew.
        const info = await getSubscriptionInfo(payer.facilitator, live.subscriptionId);
        if (info.status === "Active" || info.status === "Paused") {
          return { subscriptionId: live.subscriptionId, created: false, record: live };
        }
        if (info.status === "PastDue") {
          // Cancelled on chain too: a later approval must not let it renew.
          await inTurn(() => payer.cancel(live.subscriptionId!)).catch((error: unknown) => {
            options.logger?.warn({ agent, err: error }, "could not cancel a past-due subscription");
          });
        }
        await end(live, "ended", `found ${info.status} on chain`);
        continue;
      }
      let claimId: string | undefined;
      if (live !== undefined) {
        // Another process's claim: wait for it to finish, unless it is stale (its process died).
        const staleBefore = new Date(clock.now() - staleMs);
        if (live.claimedAt.getTime() >= staleBefore.getTime()) {
          if (clock.now() > deadline) {
            throw new TollgateError(
              "InvalidRequest",
              `plan ${request.planId} is being subscribed to by another process`,
              {
                details: { planId: request.planId, reason: "subscription_claimed" },
              },
            );
          }
          await wait(CLAIM_POLL_MS);
          continue;
        }
        const held = await onChain(request.planId);
        if (held !== undefined) {
          const plan = await planInfo(request.planId);
          await adopt(
            live.id,
            held,
            live.fromBlock,
            plan.provider,
            "a claim whose process stopped after subscribing",
          );
          const record = (await findLiveSubscription(store, key))!;
          return { subscriptionId: held, created: false, record };
        }
        if (!(await renewClaim(store, live.id, staleBefore, now()))) continue;
        claimId = live.id;
      } else {
        // Another store (or another agent) may hold the plan on this wallet: the chain says.
        const held = await onChain(request.planId);
        const plan = await planInfo(request.planId);
        const id = createId();
        const fromBlock = await currentBlock();
        const provider = request.provider ?? plan.provider;
        const claimed = await claimSubscription(store, {
          ...key,
          id,
          agent,
          provider,
          token: plan.token,
          fromBlock,
          now: now(),
        });
        if (!claimed) continue;
        if (held !== undefined) {
          await adopt(id, held, fromBlock, provider, "held on chain by this wallet already");
          const record = (await findLiveSubscription(store, key))!;
          return { subscriptionId: held, created: false, record };
        }
        claimId = id;
      }
      const plan = await planInfo(request.planId);
      try {
        const subscriptionId = await subscribeClaimed(
          claimId,
          plan,
          request.desiredCap ?? 0n,
          request.provider ?? plan.provider,
        );
        const record = (await findLiveSubscription(store, key))!;
        return { subscriptionId, created: true, record };
      } catch (error) {
        if (!isTollgateError(error) || !REFUSED.has(error.code)) throw error;
        await dropClaim(store, claimId);
        throw error;
      }
    }
  };

  const findRecord = async (subscriptionId: bigint) =>
    (await listLiveSubscriptions(store, agent)).find((r) => r.subscriptionId === subscriptionId);

  const end = async (record: AgentSubscriptionRecord, status: "paused" | "ended", note: string) => {
    await setSubscriptionStatus(store, record.id, status, now(), note);
    if (status === "ended") {
      await budget.releaseHold(agent, holdRefOf(record.id));
      await budget.endSubscription(agent, holdRefOf(record.id));
    }
  };

  const alert = (
    record: AgentSubscriptionRecord,
    action: SubscriptionAlert["action"],
    reason: string,
    beyondHold = 0n,
  ) => {
    const event: SubscriptionAlert = {
      agent,
      subscriptionId: record.subscriptionId ?? 0n,
      planId: record.planId,
      provider: record.provider,
      action,
      reason,
      beyondHold,
    };
    options.logger?.warn(
      { ...event, subscriptionId: event.subscriptionId.toString(), beyondHold: beyondHold.toString() },
      `subscription ${action}: ${reason}`,
    );
    options.onAlert?.(event);
  };

  /** Relays a permit setting the manager's allowance over `token` to `value` (no-op without a signer). */
  const approve = async (token: Address, value: bigint, why: string) => {
    const signer = payer.account;
    if (signer === undefined) return false;
    try {
      await approveThroughFacilitator(payer.facilitator, signer, { token, value });
      options.logger?.info({ agent, token, approval: value.toString(), why }, "approval topped up");
      return true;
    } catch (error) {
      options.logger?.warn({ agent, err: error, why }, "could not top up the approval");
      return false;
    }
  };

  /**
   * Raises the subscription's spend limit on chain to what the budget has committed to it: the first
   * period, everything charged under its hold, and what the hold still holds. Never lowers it (a
   * limit below that only refuses pulls sooner), never sets it above it: the manager then refuses any
   * pull the budget did not hold, whatever the shared approval allows. `direct` when the caller holds
   * the wallet's turn already. Without a payer that can sign the limit, the approval alone bounds it.
   */
  const boundOnChain = async (record: AgentSubscriptionRecord, direct = false) => {
    const id = record.subscriptionId;
    const setSpendLimit = payer.setSpendLimit;
    if (id === undefined || setSpendLimit === undefined) return;
    const hold = await budget.getHold(agent, holdRefOf(record.id));
    if (hold === undefined) return;
    const target = record.recordedFirst + hold.charged + hold.held;
    const info = await getSubscriptionInfo(payer.facilitator, id);
    if (info.status !== "Active" || info.spendLimit === undefined || BigInt(info.spendLimit) >= target)
      return;
    const raise = () => setSpendLimit.call(payer, id, target);
    try {
      await (direct ? raise() : inTurn(raise));
    } catch (error) {
      // The limit stays where it was: the next renewal fails rather than overspend; the next look retries.
      options.logger?.warn({ agent, err: error }, "could not raise the spend limit to the hold");
      return;
    }
    options.logger?.info(
      { agent, subscriptionId: id.toString(), spendLimit: target.toString() },
      "spend limit raised to what the budget holds",
    );
  };

  /**
   * Tops each token's approval up to what the budget holds for the wallet's subscriptions in that token
   * (the holds of every live subscription of the wallet on this manager in the token, of any agent
   * sharing it) plus what this agent's ledger recorded in it but the chain has not pulled yet (metered
   * use the gate deducts later: already spent in the ledger, still to come out of the allowance).
   * Never lowers an approval, never sets one above that: the allowance is per token, so are the sums.
   */
  const topUpApproval = async (pendingByToken: Map<string, bigint>) => {
    if (payer.account === undefined) return;
    for (const [token, pending] of pendingByToken) {
      // Read and set in the wallet's turn: a subscribe between the two would be left unapproved.
      await inTurn(async () => {
        const target =
          (await otherHoldsOfWallet(store, {
            subscriber: payer.address,
            manager: await manager(),
            token,
            exceptId: "",
          })) + pending;
        const info = await getSubscriberInfo(payer.facilitator, payer.address, {
          token: token as Address,
        });
        const allowance = BigInt(info.token?.allowance ?? "0");
        if (allowance >= target) return;
        await approve(token as Address, target, "the budget holds the next renewal");
      });
    }
  };

  /**
   * Keeps the hold of an Active subscription at what it can take before the next look: the rest of
   * this period's cap, the next renewal and its cap. When the budget cannot hold that and the wallet's
   * approval could let it renew, pauses it: true. The approval is one per token, shared by the
   * wallet's subscriptions: it could fund this renewal when it already exceeds this hold, when other
   * subscriptions hold in the token (the look's top-up raises the approval to their holds), or when
   * the caller is about to raise it (`approvalRises`: a subscribe or a cap raise). Only a lone
   * subscription whose approval is no larger than its hold is left to the chain, which refuses the
   * renewal. `pause` is the caller's when it already holds the wallet's turn.
   */
  const coverNextRenewal = async (
    record: AgentSubscriptionRecord,
    price: bigint,
    held: bigint,
    how: { approvalRises?: boolean; pause?: (id: bigint) => Promise<unknown> } = {},
  ) => {
    const id = record.subscriptionId!;
    const info = await getSubscriptionInfo(payer.facilitator, id);
    if (info.status !== "Active") return false;
    const cap = BigInt(info.maxOverage);
    const used = BigInt(info.overageUsed);
    const need = (cap > used ? cap - used : 0n) + price + cap;
    if (held >= need) return false;
    try {
      await budget.hold(agent, {
        ref: holdRefOf(record.id),
        provider: record.provider as Address,
        amount: need - held,
      });
      // What is held now may be pulled: the limit follows (in the caller's turn when it holds one).
      await boundOnChain(record, how.pause !== undefined);
      return false;
    } catch (error) {
      if (!isTollgateError(error, "BudgetExceeded") && !isTollgateError(error, "ApprovalDenied")) throw error;
    }
    if (how.approvalRises !== true) {
      const subscriber = await getSubscriberInfo(payer.facilitator, payer.address, { token: info.token });
      const allowance = BigInt(subscriber.token?.allowance ?? "0");
      const others = await otherHoldsOfWallet(store, {
        subscriber: payer.address,
        manager: await manager(),
        token: info.token,
        exceptId: record.id,
      });
      if (allowance <= held && others === 0n) return false;
    }
    const reason = "the budget cannot hold its next renewal, and the wallet's approval could let it renew";
    await (how.pause ?? ((subscriptionId: bigint) => inTurn(() => payer.pause(subscriptionId))))(id);
    await end(record, "paused", reason);
    alert(record, "paused", reason);
    return true;
  };

  /**
   * Before the wallet's approval over `token` grows (a subscribe, a cap raise), pauses this agent's
   * Active subscriptions in the token whose next renewal the budget cannot hold: the larger approval
   * would otherwise fund their renewal out of what it holds for another subscription. Runs in the
   * wallet's turn (pauses directly).
   */
  const pauseUnheldBeforeApproval = async (token: string, exceptId: string) => {
    for (const record of await listLiveSubscriptions(store, agent)) {
      if (record.id === exceptId || record.status !== "active" || record.subscriptionId === undefined)
        continue;
      const plan = await planInfo(record.planId);
      if (plan.token.toLowerCase() !== token.toLowerCase()) continue;
      const held = (await budget.getHold(agent, holdRefOf(record.id)))?.held ?? 0n;
      await coverNextRenewal(record, BigInt(plan.amount), held, {
        approvalRises: true,
        pause: (id) => payer.pause(id),
      });
    }
  };

  return {
    ensure(request) {
      const key = request.planId;
      let pending = ensuring.get(key);
      if (pending === undefined) {
        pending = ensureOnce(request).finally(() => ensuring.delete(key));
        ensuring.set(key, pending);
        return pending;
      }
      // Joined another call's subscribe: for this call nothing new was charged.
      return pending.then((ensured) => ({ ...ensured, created: false }));
    },

    async sync() {
      const chain = options.chain;
      if (chain === undefined) {
        throw new TollgateError("InvalidRequest", "watching subscriptions needs a chain client (an RPC)");
      }
      // One-time payments whose /authorize answer was lost are read back on each look too
      // (src/agent/budget/pendingPayments.ts): a long-running agent resolves them without a next call.
      if (typeof payer.payment === "function") {
        const reader = { address: payer.address, payment: payer.payment.bind(payer) };
        const reads = chain.readContract === undefined ? undefined : (chain as ReadClient);
        await resolvePendingPayments({ agent, budget, payer: reader, clock, chain: reads }).catch(
          (error: unknown) => options.logger?.warn({ err: error }, "pending payments not read back"),
        );
      }
      const out: SyncedSubscription[] = [];
      /** Per token of a subscription that goes on: recorded in the ledger, not pulled on chain yet. */
      const pendingByToken = new Map<string, bigint>();
      for (const record of await listLiveSubscriptions(store, agent)) {
        if (record.subscriptionId === undefined) continue;
        const id = record.subscriptionId;
        const plan = await planInfo(record.planId);
        const token = plan.token.toLowerCase();
        if (record.token === undefined) await setSubscriptionToken(store, record.id, token);
        const pulls = await readSubscriptionPulls(chain, {
          manager: record.manager as Address,
          subscriptionId: record.subscriptionId,
          fromBlock: record.fromBlock,
        });
        const beyondFirst = pulls.total > record.recordedFirst ? pulls.total - record.recordedFirst : 0n;
        const charged = await budget.charge(agent, {
          ref: holdRefOf(record.id),
          kind: "subscription",
          total: beyondFirst,
        });
        let action: SyncedSubscription["action"] = "none";
        if (pulls.cancelled) {
          await end(record, "ended", "cancelled on chain");
          alert(record, "ended", "cancelled on chain");
          action = "ended";
        } else if (charged.beyondHold > 0n && record.status === "active") {
          const reason = `the seller took ${formatUnitsExact(charged.beyondHold)} USDC more than the budget held for it`;
          try {
            await inTurn(() => payer.pause(id));
            await end(record, "paused", reason);
            action = "paused";
          } catch (error) {
            options.logger?.warn(
              { agent, err: error },
              "could not pause an overdrawn subscription; cancelling",
            );
            await inTurn(() => payer.cancel(id));
            await end(record, "ended", reason);
            action = "cancelled";
          }
          alert(record, action === "paused" ? "paused" : "cancelled", reason, charged.beyondHold);
        } else if (pulls.pastDue) {
          // Its renewal failed (the approval the budget gave is used up): it serves nothing any more.
          const reason = "its renewal failed: the approval the budget gave is used up";
          try {
            await inTurn(() => payer.cancel(id));
          } catch (error) {
            options.logger?.warn({ agent, err: error }, "could not cancel a past-due subscription");
          }
          await end(record, "ended", reason);
          alert(record, "cancelled", reason);
          action = "cancelled";
        } else if (
          record.status === "active" &&
          (await coverNextRenewal(record, BigInt(plan.amount), charged.held))
        ) {
          action = "paused";
        }
        if (action === "none" && record.status === "active") await boundOnChain(record);
        if (action === "none") {
          const pending = charged.charged > beyondFirst ? charged.charged - beyondFirst : 0n;
          pendingByToken.set(token, (pendingByToken.get(token) ?? 0n) + pending);
        }
        out.push({
          subscriptionId: record.subscriptionId,
          planId: record.planId,
          pulled: pulls.total,
          recorded: charged.amount,
          beyondHold: charged.beyondHold,
          action,
        });
      }
      await topUpApproval(pendingByToken);
      return out;
    },

    find: findRecord,

    async chargeUsage(subscriptionId, amount) {
      if (amount <= 0n) return true;
      const record = await findRecord(subscriptionId);
      if (record === undefined) return false;
      await budget.charge(agent, { ref: holdRefOf(record.id), kind: "metered", amount });
      return true;
    },

    async raiseCap(subscriptionId, plan) {
      const record = await findRecord(subscriptionId);
      if (record === undefined || record.status !== "active" || plan.overageUnitPrice === 0n)
        return undefined;
      const info = await getSubscriptionInfo(payer.facilitator, subscriptionId);
      if (info.status !== "Active") return undefined;
      let step = plan.overageUnitPrice * BigInt(Math.max(plan.includedUnits, 10));
      const room = holdRoom(await budget.report(agent), record.provider);
      if (room !== undefined && room < step) step = room;
      if (step < plan.overageUnitPrice) return undefined;
      try {
        await budget.hold(agent, {
          ref: holdRefOf(record.id),
          provider: record.provider as Address,
          amount: step,
        });
      } catch (error) {
        if (isTollgateError(error, "BudgetExceeded") || isTollgateError(error, "ApprovalDenied"))
          return undefined;
        throw error;
      }
      // The raise is held: the approval may grow by as much (it stays within what the budget holds),
      // read and set in the wallet's turn so no other action of the wallet moves it in between.
      const maxOverage = BigInt(info.maxOverage) + step;
      await inTurn(async () => {
        await pauseUnheldBeforeApproval(info.token, record.id);
        const wallet = await getSubscriberInfo(payer.facilitator, payer.address, { token: info.token });
        await approve(info.token as Address, BigInt(wallet.token?.allowance ?? "0") + step, "cap raised");
        await boundOnChain(record, true);
        await payer.setMaxOverage(subscriptionId, maxOverage);
      });
      return { maxOverage };
    },

    async cancel(subscriptionId, reason) {
      const record = await findRecord(subscriptionId);
      await inTurn(() => payer.cancel(subscriptionId));
      if (record !== undefined) {
        await end(record, "ended", reason);
        alert(record, "cancelled", reason);
      }
    },
  };
}
