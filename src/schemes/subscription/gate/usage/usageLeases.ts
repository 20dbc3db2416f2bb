/**
 * Leased allowance (docs/gate.md, "Metering across instances"): the rules a shared usage ledger
 * (PostgreSQL, Redis) applies when gate instances lease blocks of a subscription's units, spend them
 * locally and hand back what they did not spend. Pure: the stores hold the state and apply these
 * functions atomically (a row lock, a compare-and-set), so every store answers alike.
 *
 * Invariants (with U = units spent this cycle, L = units out on live leases, O = overage charged):
 * - Charges are count-based: every spend of k units (a direct use, or a lease's spent units when it
 *   ends) charges owed(U + k) − owed(U), where owed(n) = unitPrice × max(0, n − included). The sum
 *   telescopes, so a cycle is charged exactly owed(U) plus direct charges, however leases interleave.
 * - Commitment: O + owed(U + L) − owed(U) never exceeds what the cap allows. A grant or a direct use
 *   is admitted only if it keeps that true; a lease ending with k ≤ N spent only lowers it (owed has
 *   non-decreasing increments). So the cap holds whatever the leases spend, and across instances.
 * - A use refused only because capacity sits on other instances' live leases is `Leased` (retry),
 *   never `AllowanceExhausted`: the leases come back (returned, or reclaimed at expiry).
 */
import type { Reservation, UsageCycle, UsageLedger, UsageRequest } from "./usageLedger.ts";

/** A subscription's cycle in a shared ledger: `UsageCycle` plus the units out on live leases. */
export type SharedCycle = UsageCycle & {
  leased: bigint;
  /** Counts the cycles of this subscription: a lease ends into its own cycle only. */
  epoch: number;
};

/** What a lease holds: its units, where the block started, the plan terms at grant, its exposure. */
export type LeaseGrant = {
  units: bigint;
  /** Units of the cycle counted or leased before this block (`unitsUsed` of its first unit − 1). */
  base: bigint;
  includedUnits: bigint;
  unitPrice: bigint;
  /** The most the block can charge: counted in the ledger's unsettled figure until the lease ends. */
  worst: bigint;
};

/** A lease as a shared ledger stores it (its first use is already spent). */
export type StoredLease = LeaseGrant & {
  id: string;
  subscriptionId: bigint;
  /** The cycle (`SharedCycle.epoch`) the lease was granted in. */
  epoch: number;
  spent: bigint;
};

/** Owed past the included units for `n` units in one cycle. */
export function owed(n: bigint, includedUnits: bigint, unitPrice: bigint): bigint {
  return n > includedUnits ? (n - includedUnits) * unitPrice : 0n;
}

/** The cycle a request lands in: a new one when the chain's period moved past the stored one. */
export function currentCycle(stored: SharedCycle | undefined, request: UsageRequest): SharedCycle {
  if (stored === undefined || request.periodStart >= stored.periodEnd) {
    return {
      periodStart: request.periodStart,
      periodEnd: request.periodEnd,
      units: 0n,
      overage: 0n,
      pending: stored?.pending ?? 0n,
      // Leases of an earlier cycle settle into `pending` only (see `endLease`).
      leased: 0n,
      epoch: (stored?.epoch ?? 0) + 1,
    };
  }
  if (request.periodStart > stored.periodStart) {
    return { ...stored, periodStart: request.periodStart, periodEnd: request.periodEnd };
  }
  return { ...stored };
}

/** Overage the cap still allows this cycle before counting live leases. */
function availableOf(cycle: SharedCycle, request: UsageRequest): bigint {
  const used = larger(request.overageUsed, cycle.overage);
  return request.maxOverage > used ? request.maxOverage - used : 0n;
}

/**
 * Units past U that the cap allows (spent or leased), counting `extra` charged directly; `undefined`
 * when unbounded would not apply (it always is bounded: a plan without overage stops at included).
 */
function unitsRoom(cycle: SharedCycle, request: UsageRequest, extra: bigint): bigint {
  const available = availableOf(cycle, request) - extra;
  if (available < 0n) return -1n;
  const free = request.includedUnits > cycle.units ? request.includedUnits - cycle.units : 0n;
  if (request.unitPrice === 0n) return free;
  return free + available / request.unitPrice;
}

export type DirectOutcome = { reservation: Reservation; cycle?: SharedCycle; unsettled: bigint };

/**
 * One use spent straight through the shared store (no lease): a direct charge, the last units near
 * the cap, or an instance that holds no lease. Count-based charge; admitted only if the commitment
 * with every live lease still fits the cap (else `Leased` when the leases hold the missing room).
 */
export function applyDirectUsage(
  stored: SharedCycle | undefined,
  unsettled: bigint,
  request: UsageRequest,
): DirectOutcome {
  const cycle = currentCycle(stored, request);
  const units = BigInt(request.units);
  const extra = request.charge ?? 0n;
  const { includedUnits: inc, unitPrice: price } = request;
  const charge = owed(cycle.units + units, inc, price) - owed(cycle.units, inc, price) + extra;
  const before = cycle.units + cycle.leased;
  const room = unitsRoom(cycle, request, extra);
  if (room < units + cycle.leased) {
    // Would it fit if the live leases came back unspent? Then it is a matter of waiting.
    if (cycle.leased > 0n && room >= units) {
      return { unsettled, reservation: { ok: false, reason: "Leased", unitsUsed: before, charge } };
    }
    const available = availableOf(cycle, request);
    return {
      unsettled,
      reservation: { ok: false, reason: "AllowanceExhausted", unitsUsed: before, charge, available },
    };
  }
  if (charge > 0n && unsettled + charge > request.maxUnsettled) {
    return {
      unsettled,
      reservation: { ok: false, reason: "ExposureLimit", unitsUsed: before, charge, unsettled },
    };
  }
  cycle.units += units;
  cycle.overage += charge;
  cycle.pending += charge;
  return {
    cycle,
    unsettled: unsettled + charge,
    reservation: { ok: true, unitsUsed: before + units, charge },
  };
}

/**
 * The largest lease the cap admits for a request wanting `want` units (its own use included), sized
 * so one instance never takes more than a quarter of the room left: near the cap, leases shrink,
 * and when the room is too small for a lease beyond the request itself, `undefined` (spend directly).
 */
export function grantSize(
  stored: SharedCycle | undefined,
  unsettled: bigint,
  request: UsageRequest,
  want: bigint,
): { cycle: SharedCycle; grant: LeaseGrant } | undefined {
  if ((request.charge ?? 0n) > 0n) return undefined;
  const cycle = currentCycle(stored, request);
  const units = BigInt(request.units);
  const room = unitsRoom(cycle, request, 0n) - cycle.leased;
  let size = want < room / 4n ? want : room / 4n;
  if (size <= units) return undefined;
  const { includedUnits: inc, unitPrice: price } = request;
  const at = cycle.units + cycle.leased;
  const worstOf = (n: bigint) => owed(at + n, inc, price) - owed(at, inc, price);
  // The block's worst charge counts as unsettled exposure until it ends: shrink it to fit the bound.
  while (size > units && unsettled + worstOf(size) > request.maxUnsettled) size /= 2n;
  if (size <= units) return undefined;
  cycle.leased += size;
  return {
    cycle,
    grant: { units: size, base: at, includedUnits: inc, unitPrice: price, worst: worstOf(size) },
  };
}

/** The first use's answer from a fresh lease (positional: its units are the block's first). */
export function firstUseOf(grant: LeaseGrant, units: bigint): Reservation & { ok: true } {
  return spendReservation(grant, 0n, units);
}

/** The answer of a use of `units` at offset `spent` of a lease's block. */
export function spendReservation(
  grant: LeaseGrant,
  spent: bigint,
  units: bigint,
): Reservation & { ok: true } {
  const at = grant.base + spent;
  return {
    ok: true,
    unitsUsed: at + units,
    charge:
      owed(at + units, grant.includedUnits, grant.unitPrice) - owed(at, grant.includedUnits, grant.unitPrice),
  };
}

/**
 * Ends a lease with `spent` units spent: its unspent units go back, its spent ones are counted and
 * charged count-based, and its exposure is replaced by the real charge. A lease of an earlier period
 * (epoch) than the stored cycle charges its block positionally into `pending` only.
 */
export function endLease(
  stored: SharedCycle | undefined,
  unsettled: bigint,
  lease: Pick<StoredLease, "epoch" | "units" | "base" | "includedUnits" | "unitPrice" | "worst">,
  spent: bigint,
): { cycle: SharedCycle | undefined; unsettled: bigint; charge: bigint } {
  const { includedUnits: inc, unitPrice: price } = lease;
  if (stored === undefined) return { cycle: undefined, unsettled: unsettled - lease.worst, charge: 0n };
  const cycle = { ...stored };
  let charge: bigint;
  if (stored.epoch === lease.epoch) {
    charge = owed(cycle.units + spent, inc, price) - owed(cycle.units, inc, price);
    cycle.leased = cycle.leased >= lease.units ? cycle.leased - lease.units : 0n;
    cycle.units += spent;
    cycle.overage += charge;
  } else {
    charge = owed(lease.base + spent, inc, price) - owed(lease.base, inc, price);
  }
  cycle.pending += charge;
  const next = unsettled - lease.worst + charge;
  return { cycle, unsettled: next > 0n ? next : 0n, charge };
}

/** A use persisted into a lease: `units` more spent of lease `leaseId`. */
export type LeaseSpend = { leaseId: string; units: bigint };

/** What `acquire` answers: a lease whose first use is the request (already spent), or a direct use. */
export type LeaseAcquisition =
  | { lease: StoredLease; reservation: Reservation & { ok: true } }
  | { lease: undefined; reservation: Reservation };

/**
 * A usage ledger that several gate instances share and that leases allowance
 * (`createPostgresUsageLedger`, `createRedisUsageLedger`); `createLeasedUsageLedger` spends its
 * leases locally. `reserve` alone is the direct path and is exact on its own.
 */
export type SharedUsageLedger = UsageLedger & {
  /**
   * Grants a lease of up to `want` units whose first use is `request` (persisted), for `ttlMs` by the
   * store's clock; when the room left is too small for a lease, spends `request` directly instead.
   */
  acquire(request: UsageRequest, want: number, ttlMs: number): Promise<LeaseAcquisition>;
  /**
   * Persists uses into live leases, one round trip for all of them; answers the ids of the leases
   * that took their units. A lease returned, reclaimed or expired takes none (fencing).
   */
  spend(spends: readonly LeaseSpend[]): Promise<Set<string>>;
  /**
   * How many `spend` writes one instance keeps in flight at once (default 1): more where the store
   * runs them side by side and commits them together (PostgreSQL), one where it runs them one after
   * another anyway (Redis).
   */
  readonly spendWrites?: number;
  /** Ends a lease: its spent units are counted and charged, the rest go back. Idempotent. */
  release(leaseId: string): Promise<void>;
  /** Ends leases past their expiry (a crashed or stalled instance's) with the units persisted into them. */
  reclaimExpired(limit: number): Promise<number>;
};

function larger(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
