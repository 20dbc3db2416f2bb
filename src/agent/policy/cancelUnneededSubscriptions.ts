/**
 * Cancels, before they renew, the agent's subscriptions that the running forecast no longer justifies
 * (the rule is `reviewSubscription`; this applies it and says why). Run it from anything that wakes
 * in the window before a renewal: a subscription watcher, or the start and end of a run.
 *
 * Safety:
 * - Only subscriptions this agent has call evidence for are judged: a plan it never called (another
 *   agent's on a shared wallet, or one subscribed by hand) is left alone.
 * - Never twice: a cancel is claimed in `claims` (per subscriber and subscription, in the store when
 *   there is one) before it is sent, so two processes never both send it; a failed cancel drops its
 *   claim so a later check may try again. The chain is the last word: a cancelled subscription is not
 *   Active, and `reviewSubscription` keeps (does nothing to) anything not Active.
 * - The cancel is the subscriber's own intent, signed by the payer and relayed by the facilitator
 *   (`payer.cancel`, or the budget's subscription keeper, which also ends the budget's hold).
 */
import type { Address } from "viem";
import { z } from "zod";
import type { Clock } from "../../protocol/clock.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Store } from "../../store/store.ts";
import type { DemandHistory } from "./createDemandHistory.ts";
import type { PolicyForecast } from "./decide.ts";
import type { DemandModel } from "./demandEstimate.ts";
import { type HeldSubscription, reviewSubscription, type SubscriptionReview } from "./reviewSubscription.ts";

/**
 * Where the agent's subscriptions come from and how one is cancelled. `facilitatorSubscriptions`
 * (the subscription scheme's agent part) reads them from the facilitator (`GET /subscribers/:address`); the budget's stored subscriptions
 * can provide the same two calls.
 */
export type HeldSubscriptionSource = {
  /** The subscriptions held now, with the chain's time they were read at (seconds). */
  list(): Promise<{ subscriptions: HeldSubscription[]; chainTime: number }>;
  cancel(subscriptionId: string, reason: string): Promise<void>;
};

/** Claims on cancels, so a subscription is cancelled once whatever the number of processes. */
export type CancelClaims = {
  /** True when this caller now holds the claim (nobody cancelled or is cancelling it). */
  claim(entry: {
    subscriber: string;
    subscriptionId: string;
    agent: string;
    reason: string;
  }): Promise<boolean>;
  done(subscriber: string, subscriptionId: string): Promise<void>;
  drop(subscriber: string, subscriptionId: string): Promise<void>;
  /** Cancels recorded for a subscriber, with their reasons (for reports). */
  list(
    subscriber: string,
  ): Promise<{ subscriptionId: string; agent: string; reason: string; status: string }[]>;
};

export type SubscriptionCancelOutcome = SubscriptionReview & {
  /** For `cancel`: whether it was sent now (`cancelled`), was already claimed, or failed. */
  outcome?: "cancelled" | "already-cancelled" | "failed" | undefined;
  error?: string | undefined;
};

/** Claims in memory: one process. */
export function createMemoryCancelClaims(): CancelClaims {
  const rows = new Map<string, { subscriptionId: string; agent: string; reason: string; status: string }>();
  const id = (subscriber: string, subscriptionId: string) => `${subscriber.toLowerCase()}:${subscriptionId}`;
  return {
    async claim(e) {
      const k = id(e.subscriber, e.subscriptionId);
      if (rows.has(k)) return false;
      rows.set(k, { subscriptionId: e.subscriptionId, agent: e.agent, reason: e.reason, status: "claimed" });
      return true;
    },
    async done(subscriber, subscriptionId) {
      const row = rows.get(id(subscriber, subscriptionId));
      if (row !== undefined) row.status = "cancelled";
    },
    async drop(subscriber, subscriptionId) {
      rows.delete(id(subscriber, subscriptionId));
    },
    async list(subscriber) {
      const prefix = `${subscriber.toLowerCase()}:`;
      return [...rows.entries()].filter(([k]) => k.startsWith(prefix)).map(([, v]) => ({ ...v }));
    },
  };
}

const ClaimRowSchema = z.object({
  subscription_id: z.string(),
  agent: z.string(),
  reason: z.string(),
  status: z.string(),
});

/** Claims in the agent's store (table `agent_subscription_cancels`, migration 0076). */
export function createCancelClaims(options: { store: Store; clock: Clock }): CancelClaims {
  const { store, clock } = options;
  return {
    async claim(e) {
      const rows = await store.query(
        `INSERT INTO agent_subscription_cancels (subscriber, subscription_id, agent, reason, status, claimed_at)
         VALUES ($1, $2, $3, $4, 'claimed', $5) ON CONFLICT DO NOTHING RETURNING subscription_id`,
        [
          e.subscriber.toLowerCase(),
          e.subscriptionId,
          e.agent,
          e.reason.slice(0, 2000),
          new Date(clock.now()),
        ],
      );
      return rows.length === 1;
    },
    async done(subscriber, subscriptionId) {
      await store.query(
        `UPDATE agent_subscription_cancels SET status = 'cancelled', cancelled_at = $3
         WHERE subscriber = $1 AND subscription_id = $2`,
        [subscriber.toLowerCase(), subscriptionId, new Date(clock.now())],
      );
    },
    async drop(subscriber, subscriptionId) {
      await store.query(
        `DELETE FROM agent_subscription_cancels WHERE subscriber = $1 AND subscription_id = $2 AND status = 'claimed'`,
        [subscriber.toLowerCase(), subscriptionId],
      );
    },
    async list(subscriber) {
      const rows = await queryParsed(
        store,
        ClaimRowSchema,
        `SELECT subscription_id, agent, reason, status FROM agent_subscription_cancels
         WHERE subscriber = $1 ORDER BY claimed_at`,
        [subscriber.toLowerCase()],
      );
      return rows.map((r) => ({
        subscriptionId: r.subscription_id,
        agent: r.agent,
        reason: r.reason,
        status: r.status,
      }));
    },
  };
}

/** The narrow logger outcomes are written to; a pino logger satisfies it. */
export type CancelLogger = { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };

/**
 * Reviews every subscription `source` lists and cancels those the running forecast does not justify.
 * Returns one outcome per subscription the agent has evidence for, with the reason.
 * @example
 * const outcomes = await cancelUnneededSubscriptions({
 *   agent, subscriber: payer.address, source: facilitatorSubscriptions(payer), demand, claims, clock,
 * });
 */
export async function cancelUnneededSubscriptions(options: {
  agent: string;
  subscriber: Address;
  source: HeldSubscriptionSource;
  demand: DemandHistory;
  claims: CancelClaims;
  clock: Clock;
  /** The planner's forecast for a subscription's plan, if any (the prior). */
  prior?: ((subscription: HeldSubscription) => PolicyForecast | undefined) | undefined;
  leadSeconds?: number | undefined;
  model?: DemandModel | undefined;
  logger?: CancelLogger | undefined;
}): Promise<SubscriptionCancelOutcome[]> {
  const { agent, subscriber, source, demand, claims, clock, logger } = options;
  const { subscriptions, chainTime } = await source.list();
  const outcomes: SubscriptionCancelOutcome[] = [];
  for (const subscription of subscriptions) {
    const record = await demand.get({ agent, provider: subscription.provider, planId: subscription.planId });
    if (record === undefined) continue;
    const review = reviewSubscription({
      subscription,
      demand: record,
      prior: options.prior?.(subscription),
      nowMs: clock.now(),
      chainTime,
      leadSeconds: options.leadSeconds,
      model: options.model,
    });
    if (review.action === "keep") {
      outcomes.push(review);
      continue;
    }
    const id = subscription.subscriptionId;
    if (!(await claims.claim({ subscriber, subscriptionId: id, agent, reason: review.reason }))) {
      outcomes.push({ ...review, outcome: "already-cancelled" });
      continue;
    }
    try {
      await source.cancel(id, review.reason);
      await claims.done(subscriber, id);
      logger?.info(
        { agent, subscriptionId: id, reason: review.reason },
        "policy cancelled a subscription before renewal",
      );
      outcomes.push({ ...review, outcome: "cancelled" });
    } catch (error) {
      await claims.drop(subscriber, id);
      const message = error instanceof Error ? error.message : String(error);
      logger?.warn({ agent, subscriptionId: id, err: error }, "policy could not cancel a subscription");
      outcomes.push({ ...review, outcome: "failed", error: message });
    }
  }
  return outcomes;
}
