/**
 * The usage ledger (docs/gate.md): what a gate (or every instance of one API) has counted of each
 * subscription's metered use in its current cycle, what it has charged past the included units, and
 * which of those charges are not yet settled on chain.
 *
 * Life of a charge: `reserve` adds it to the subscription's `pending` amount and to the ledger's
 * `unsettled` exposure, atomically with the cap checks; `claimBatch` moves every pending amount into a
 * batch with one item per subscription and a deterministic `ref` (so a resent batch is recognised by
 * the facilitator, which is idempotent on ref); `markBatchSent` records that the facilitator accepted
 * it; `resolve` — when the facilitator reports an item settled or failed on chain — takes it out of
 * `unsettled`.
 *
 * Implementations: `createMemoryUsageLedger` (one process), `createPostgresUsageLedger` and
 * `createRedisUsageLedger` (instances sharing one database or Redis; `applyDirectUsage`, the same rule
 * counting live leases), and `createLeasedUsageLedger` over either of the shared ones (usageLeases.ts).
 */
import { createHash } from "node:crypto";

/** One metered use to reserve. Chain figures are the subscription's state as last read. */
export type UsageRequest = {
  subscriptionId: bigint;
  /** The chain's current period of the subscription, unix seconds. */
  periodStart: number;
  periodEnd: number;
  /** Units this request uses (≥ 0). */
  units: number;
  /**
   * An amount charged directly against the overage cap (smallest unit), beside the units' overage:
   * a handler's `deductAllowance(amount)`. Absent or 0 for a plain metered use.
   */
  charge?: bigint | undefined;
  /** Units per cycle included in the plan's price. */
  includedUnits: bigint;
  /** Price per unit past the included ones; 0 means the plan has no overage. */
  unitPrice: bigint;
  /** The subscription's overage cap per cycle, and what the chain has deducted of it this cycle. */
  maxOverage: bigint;
  overageUsed: bigint;
  /** The gate's bound on charges not yet settled on chain (all subscriptions together). */
  maxUnsettled: bigint;
};

export type Reservation =
  | {
      ok: true;
      /** Units counted in this cycle after this request. */
      unitsUsed: bigint;
      /** What this request was charged past the included units (0 within them). */
      charge: bigint;
    }
  | {
      ok: false;
      /** The cap (or a plan without overage) does not allow the charge. */
      reason: "AllowanceExhausted";
      unitsUsed: bigint;
      charge: bigint;
      /** What the cap still allowed before this request. */
      available: bigint;
    }
  | {
      ok: false;
      /** Charges not yet settled on chain would pass `maxUnsettled`. */
      reason: "ExposureLimit";
      unitsUsed: bigint;
      charge: bigint;
      unsettled: bigint;
    }
  | {
      ok: false;
      /**
       * The cap has room only on other gate instances' live leases (a leased shared ledger): retry
       * shortly, once they are returned or reclaimed at expiry.
       */
      reason: "Leased";
      unitsUsed: bigint;
      charge: bigint;
    };

/** One subscription's counts in its current cycle. */
export type UsageCycle = {
  periodStart: number;
  periodEnd: number;
  units: bigint;
  /** Charged past the included units this cycle. */
  overage: bigint;
  /** Charged and not yet handed to the facilitator. */
  pending: bigint;
};

/** A batch of charges for the facilitator's `POST /usage`: one item per subscription. */
export type UsageBatch = {
  id: string;
  items: UsageBatchItem[];
};

export type UsageBatchItem = {
  /** Idempotency key at the facilitator, unique per ledger and deterministic per (batch, subscription). */
  ref: string;
  subscriptionId: bigint;
  amount: bigint;
};

export type UsageOutcome = { ref: string; outcome: "settled" | "failed" };

export type UsageLedger = {
  /** Counts a use and charges it past the included units, or refuses it; atomic per subscription. */
  reserve(request: UsageRequest): Promise<Reservation>;
  /**
   * `reserve` without a promise, for a ledger that answers from its own memory (the in-process
   * ledger): the gate's subscription path then runs without waiting a turn. Ledgers that must reach a
   * store leave it out.
   */
  reserveNow?(request: UsageRequest): Reservation;
  /**
   * Puts every pending charge into a new batch (at most `maxItems` subscriptions), or returns a batch
   * claimed earlier but not marked sent within `staleMs` (a crash or a facilitator outage), so it is
   * sent again with the same refs. `undefined` when there is nothing to send.
   */
  claimBatch(options: { maxItems: number; staleMs: number }): Promise<UsageBatch | undefined>;
  /** The facilitator accepted the batch. */
  markBatchSent(batchId: string): Promise<void>;
  /** Settlement outcomes reported by the facilitator; unknown or already resolved refs are ignored. */
  resolve(outcomes: readonly UsageOutcome[]): Promise<number>;
  /** Charges not yet settled on chain (pending, in a batch, or sent and unresolved). */
  unsettled(): Promise<bigint>;
  /** Batch items sent to the facilitator and not yet resolved, oldest first (for reconciliation). */
  unresolved(options: { olderThanMs: number; limit: number }): Promise<UsageBatchItem[]>;
  /** One subscription's current cycle, if any use was counted. */
  cycle(subscriptionId: bigint): Promise<UsageCycle | undefined>;
  /**
   * Hands back the leases this instance holds (a leased ledger), so their spent units become pending
   * charges; called before a flush that must include everything served, and on close.
   */
  returnLeases?(): Promise<void>;
};

/**
 * The ledger's rules for one use, shared by every implementation. Pure: given the subscription's
 * cycle as stored (or none) and the ledger's unsettled total, it returns the outcome and, when the
 * use is allowed, the cycle and unsettled total to store (a refusal changes nothing).
 *
 * Cycles: a new cycle starts when the chain's current period begins at or after the stored period's
 * end — a renewal (anchored or late), a past-due recovery, or a resume that charged a new period. A
 * resume before the period's end charges nothing and leaves the period as it was (the period runs on
 * while paused), so it keeps the cycle and pausing cannot reset the included units. A chain state older than the stored one (another instance's stale cache) never moves a cycle back.
 *
 * Cap: overage used this cycle is the larger of the chain's `overageUsed` and what this ledger charged
 * this cycle — exact when this ledger is the only one deducting, and never below either.
 */
export function applyUsage(
  stored: UsageCycle | undefined,
  unsettled: bigint,
  request: UsageRequest,
): { reservation: Reservation; cycle?: UsageCycle; unsettled: bigint } {
  let cycle: UsageCycle;
  if (stored === undefined || request.periodStart >= stored.periodEnd) {
    cycle = {
      periodStart: request.periodStart,
      periodEnd: request.periodEnd,
      units: 0n,
      overage: 0n,
      pending: stored?.pending ?? 0n,
    };
  } else if (request.periodStart > stored.periodStart) {
    cycle = { ...stored, periodStart: request.periodStart, periodEnd: request.periodEnd };
  } else {
    cycle = { ...stored };
  }
  const units = BigInt(request.units);
  const before = cycle.units;
  const after = before + units;
  const billable = beyond(after, request.includedUnits) - beyond(before, request.includedUnits);
  const charge = billable * request.unitPrice + (request.charge ?? 0n);
  if (charge > 0n || billable > 0n) {
    const used = larger(request.overageUsed, cycle.overage);
    const available = request.maxOverage > used ? request.maxOverage - used : 0n;
    if ((billable > 0n && request.unitPrice === 0n) || charge > available) {
      return {
        unsettled,
        reservation: { ok: false, reason: "AllowanceExhausted", unitsUsed: before, charge, available },
      };
    }
    if (unsettled + charge > request.maxUnsettled) {
      return {
        unsettled,
        reservation: { ok: false, reason: "ExposureLimit", unitsUsed: before, charge, unsettled },
      };
    }
  }
  cycle.units = after;
  cycle.overage += charge;
  cycle.pending += charge;
  return { cycle, unsettled: unsettled + charge, reservation: { ok: true, unitsUsed: after, charge } };
}

/**
 * The facilitator-side idempotency key of one batch item: 40 hex digits of
 * sha256(ledgerId ":" batchId ":" subscriptionId), prefixed "tg". The same batch resent yields the
 * same refs; two ledgers (each with its own random id) never share one.
 */
export function usageRef(ledgerId: string, batchId: string, subscriptionId: bigint): string {
  return `tg${createHash("sha256").update(`${ledgerId}:${batchId}:${subscriptionId}`).digest("hex").slice(0, 40)}`;
}

/** Units past the included ones. */
function beyond(units: bigint, included: bigint): bigint {
  return units > included ? units - included : 0n;
}

function larger(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
