/**
 * Leases in the PostgreSQL usage ledger (usageLeases.ts gives the rules; createPostgresUsageLedger.ts
 * the locking): granting one in a transaction holding its cycle's lock, spending into live leases in
 * one statement, and ending leases (returned or reclaimed) in one transaction that locks the leases,
 * then their cycles, and writes every cycle and the exposure in its last statement.
 */
import type { z } from "zod";
import { TollgateError } from "../../../../protocol/errors.ts";
import { queryParsed } from "../../../../store/queryParsed.ts";
import type { Queryable, Store } from "../../../../store/store.ts";
import { insertLease, lockCycle, lockUnsettled, spendDirect } from "./postgresUsageCycles.ts";
import {
  CYCLE_COLUMNS,
  cycleOf,
  EndedLeaseRowSchema,
  IdRowSchema,
  KeyedCycleRowSchema,
} from "./postgresUsageRows.ts";
import {
  endLease,
  firstUseOf,
  grantSize,
  type LeaseAcquisition,
  type LeaseSpend,
  type SharedCycle,
  type StoredLease,
} from "./usageLeases.ts";
import type { UsageRequest } from "./usageLedger.ts";

type EndedLeaseRow = z.output<typeof EndedLeaseRowSchema>;

/**
 * Grants a lease of up to `want` units whose first use is `request`, in one transaction holding the
 * subscription's cycle lock; spends `request` directly when the room left is too small for a lease.
 */
export function acquireLease(
  store: Store,
  name: string,
  request: UsageRequest,
  want: number,
  ttlMs: number,
): Promise<LeaseAcquisition> {
  return store.transaction(async (tx) => {
    const { cycle: stored, unsettledSeen } = await lockCycle(
      tx,
      name,
      request.subscriptionId,
      request.periodStart,
      request.periodEnd,
    );
    const units = BigInt(request.units);
    // Sized against the exposure the cycle's statement saw; written only if the bound still holds,
    // else sized again under the ledger row's lock.
    for (const underLock of [false, true]) {
      const unsettled = underLock ? await lockUnsettled(tx, name) : unsettledSeen;
      const granted = grantSize(stored, unsettled, request, BigInt(want));
      if (granted === undefined) {
        return { lease: undefined, reservation: await spendDirect(tx, name, stored, unsettled, request) };
      }
      const { cycle, grant } = granted;
      const id = await insertLease(tx, name, request, cycle, grant, ttlMs);
      if (id === undefined) continue;
      const lease: StoredLease = {
        ...grant,
        id: id.toString(),
        subscriptionId: request.subscriptionId,
        epoch: cycle.epoch,
        spent: units,
      };
      return { lease, reservation: firstUseOf(grant, units) };
    }
    throw new TollgateError("Internal", "a usage lease sized under the ledger row's lock was not written");
  });
}

/** Persists uses into live leases in one statement; answers the ids of the leases that took them. */
export async function spendLeases(
  store: Queryable,
  name: string,
  spends: readonly LeaseSpend[],
): Promise<Set<string>> {
  if (spends.length === 0) return new Set();
  const rows = await queryParsed(
    store,
    IdRowSchema,
    `UPDATE gate_usage_leases l SET spent = l.spent + s.units
         FROM (SELECT unnest($2::bigint[]) AS id, unnest($3::bigint[]) AS units) s
         WHERE l.id = s.id AND l.ledger = $1 AND l.state = 'active' AND l.expires_at > now()
           AND l.spent + s.units <= l.units
         RETURNING l.id`,
    [name, spends.map((s) => s.leaseId), spends.map((s) => s.units.toString())],
  );
  return new Set(rows.map((row) => row.id.toString()));
}

/** Ends up to `limit` leases past their expiry, oldest expiry first; answers how many ended. */
export async function reclaimExpiredLeases(store: Store, name: string, limit: number): Promise<number> {
  const expired = await queryParsed(
    store,
    IdRowSchema,
    `SELECT id FROM gate_usage_leases WHERE ledger = $1 AND state = 'active' AND expires_at <= now()
         ORDER BY expires_at LIMIT $2`,
    [name, limit],
  );
  if (expired.length === 0) return 0;
  return endLeases(
    store,
    name,
    expired.map(({ id }) => id.toString()),
    "reclaimed",
    true,
  );
}

/**
 * Ends leases (returned or reclaimed) in one transaction: the leases, fenced on their state and
 * locked in id order; then their cycles' locks, in subscription order; then every cycle and the
 * exposure in one statement. Each block's worst charge leaves the exposure and its real charge
 * enters it; leases of one subscription end into its cycle one after the other, in id order, as
 * separate transactions would. Answers how many ended.
 */
export function endLeases(
  store: Pick<Store, "transaction">,
  name: string,
  leaseIds: readonly string[],
  state: "returned" | "reclaimed",
  onlyExpired: boolean,
): Promise<number> {
  return store.transaction(async (tx) => {
    const leases = await takeLeases(tx, name, leaseIds, state, onlyExpired);
    if (leases.length === 0) return 0;
    const cycleRows = await queryParsed(
      tx,
      KeyedCycleRowSchema,
      `SELECT subscription_id, ${CYCLE_COLUMNS} FROM gate_usage_cycles
         WHERE ledger = $1 AND subscription_id = ANY($2::numeric[])
         ORDER BY subscription_id FOR UPDATE`,
      [name, [...new Set(leases.map((lease) => lease.subscription_id.toString()))]],
    );
    const cycles = new Map(cycleRows.map((row) => [row.subscription_id, cycleOf(row)]));
    const delta = endIntoCycles(leases, cycles);
    await writeEndedCycles(tx, name, delta, [...cycles]);
    return leases.length;
  });
}

/** Moves active leases among `leaseIds` to `state`, locked in id order; answers those it moved. */
function takeLeases(
  tx: Queryable,
  name: string,
  leaseIds: readonly string[],
  state: "returned" | "reclaimed",
  onlyExpired: boolean,
): Promise<EndedLeaseRow[]> {
  return queryParsed(
    tx,
    EndedLeaseRowSchema,
    `UPDATE gate_usage_leases SET state = $3, ended_at = now()
         WHERE id IN (
           SELECT id FROM gate_usage_leases
           WHERE id = ANY($1::bigint[]) AND ledger = $2 AND state = 'active'
             ${onlyExpired ? "AND expires_at <= now()" : ""}
           ORDER BY id FOR UPDATE
         ) AND state = 'active'
         RETURNING id, subscription_id, epoch, units, spent, base, included_units, unit_price, worst`,
    [leaseIds, name, state],
  );
}

/**
 * Ends each lease into its cycle (in `cycles`, updated in place), in id order; answers how the
 * exposure moves: the real charges less the blocks' worst.
 */
function endIntoCycles(leases: EndedLeaseRow[], cycles: Map<bigint, SharedCycle>): bigint {
  let delta = 0n;
  for (const lease of leases.sort((x, y) => (x.id < y.id ? -1 : 1))) {
    // With the exposure taken as exactly the block's worst, `endLease` answers the real charge; the
    // store applies the difference to whatever the exposure is by then.
    const ended = endLease(
      cycles.get(lease.subscription_id),
      lease.worst,
      {
        epoch: lease.epoch,
        units: lease.units,
        base: lease.base,
        includedUnits: lease.included_units,
        unitPrice: lease.unit_price,
        worst: lease.worst,
      },
      lease.spent,
    );
    if (ended.cycle !== undefined) cycles.set(lease.subscription_id, ended.cycle);
    delta += ended.charge - lease.worst;
  }
  return delta;
}

/** Writes every ended lease's cycle and moves the exposure by `delta`, in one statement. */
async function writeEndedCycles(
  tx: Queryable,
  name: string,
  delta: bigint,
  written: [bigint, SharedCycle][],
): Promise<void> {
  await tx.query(
    `WITH exposure AS (
           UPDATE gate_usage_ledgers SET unsettled = GREATEST(0, unsettled + $2::numeric)
           WHERE name = $1 AND $2::numeric <> 0
         )
         UPDATE gate_usage_cycles c SET period_start = v.period_start, period_end = v.period_end,
           units = v.units, overage = v.overage, pending = v.pending, leased = v.leased, epoch = v.epoch,
           updated_at = now()
         FROM (
           SELECT unnest($3::numeric[]) AS subscription_id, unnest($4::bigint[]) AS period_start,
             unnest($5::bigint[]) AS period_end, unnest($6::bigint[]) AS units,
             unnest($7::numeric[]) AS overage, unnest($8::numeric[]) AS pending,
             unnest($9::bigint[]) AS leased, unnest($10::integer[]) AS epoch
         ) v
         WHERE c.ledger = $1 AND c.subscription_id = v.subscription_id`,
    [
      name,
      delta,
      written.map(([id]) => id.toString()),
      written.map(([, cycle]) => cycle.periodStart),
      written.map(([, cycle]) => cycle.periodEnd),
      written.map(([, cycle]) => cycle.units.toString()),
      written.map(([, cycle]) => cycle.overage.toString()),
      written.map(([, cycle]) => cycle.pending.toString()),
      written.map(([, cycle]) => cycle.leased.toString()),
      written.map(([, cycle]) => cycle.epoch),
    ],
  );
}
