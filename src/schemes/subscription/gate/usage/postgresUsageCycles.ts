/**
 * The PostgreSQL usage ledger's statements on a subscription's cycle row and the ledger row's exposure
 * (createPostgresUsageLedger.ts states the locking rules): each runs inside the caller's transaction,
 * on the ledger `name`.
 */
import { TollgateError } from "../../../../protocol/errors.ts";
import { queryOneParsed } from "../../../../store/queryParsed.ts";
import type { Queryable } from "../../../../store/store.ts";
import {
  CYCLE_COLUMNS,
  cycleOf,
  IdRowSchema,
  LockedCycleRowSchema,
  UnsettledRowSchema,
  WrittenRowSchema,
} from "./postgresUsageRows.ts";
import { applyDirectUsage, type LeaseGrant, type SharedCycle } from "./usageLeases.ts";
import type { Reservation, UsageRequest } from "./usageLedger.ts";

/**
 * The subscription's cycle row, created if missing, locked until the transaction ends; with the
 * ledger's exposure as this statement's snapshot saw it (not locked: a grant re-checks its bound
 * where it writes, see `insertLease`).
 */
export async function lockCycle(
  tx: Queryable,
  name: string,
  subscriptionId: bigint,
  periodStart: number,
  periodEnd: number,
): Promise<{ cycle: SharedCycle; unsettledSeen: bigint }> {
  const row = await queryOneParsed(
    tx,
    LockedCycleRowSchema,
    `INSERT INTO gate_usage_cycles AS c (ledger, subscription_id, period_start, period_end)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (ledger, subscription_id) DO UPDATE SET ledger = c.ledger
     RETURNING ${CYCLE_COLUMNS.split(", ")
       .map((c) => `c.${c}`)
       .join(", ")},
       (SELECT unsettled FROM gate_usage_ledgers WHERE name = $1) AS ledger_unsettled`,
    [name, subscriptionId, periodStart, periodEnd],
  );
  if (row === undefined) throw new TollgateError("Internal", "usage cycle upsert returned no row");
  return { cycle: cycleOf(row), unsettledSeen: row.ledger_unsettled };
}

/**
 * The ledger's exposure, its row locked until the transaction ends. FOR NO KEY UPDATE, not FOR
 * UPDATE: inserting a cycle or lease row takes a KEY SHARE lock on the ledger row (the foreign key),
 * which FOR UPDATE conflicts with — two uses of new subscriptions would each hold one and wait for the
 * other's (a deadlock PostgreSQL then breaks with an error).
 */
export async function lockUnsettled(tx: Queryable, name: string): Promise<bigint> {
  const ledger = await queryOneParsed(
    tx,
    UnsettledRowSchema,
    "SELECT unsettled FROM gate_usage_ledgers WHERE name = $1 FOR NO KEY UPDATE",
    [name],
  );
  return ledger?.unsettled ?? 0n;
}

/**
 * Writes a cycle and moves the ledger's exposure by `delta`, in one statement that is the
 * transaction's last before its commit: the ledger row, which every instance's grants, charges and
 * returns update, stays locked for that statement and the commit only, never across a round trip of
 * the caller's. With a `bound`, nothing is written unless the exposure stays within it (checked on
 * the row's current value, under its lock); answers whether it was written. A `delta` of 0 leaves
 * the ledger row alone.
 */
export async function writeCycleAndExposure(
  tx: Queryable,
  name: string,
  subscriptionId: bigint,
  cycle: SharedCycle,
  delta: bigint,
  bound: bigint | undefined,
): Promise<boolean> {
  const row = await queryOneParsed(
    tx,
    WrittenRowSchema,
    `WITH exposure AS (
       UPDATE gate_usage_ledgers SET unsettled = unsettled + $10::numeric
       WHERE name = $1 AND $10::numeric <> 0
         AND ($11::numeric IS NULL OR unsettled + $10::numeric <= $11::numeric)
       RETURNING 1
     ), applied AS (
       SELECT ($10::numeric = 0 OR EXISTS (SELECT 1 FROM exposure)) AS ok
     ), cycle AS (
       UPDATE gate_usage_cycles SET period_start = $3, period_end = $4, units = $5, overage = $6,
         pending = $7, leased = $8, epoch = $9, updated_at = now()
       WHERE ledger = $1 AND subscription_id = $2::numeric AND (SELECT ok FROM applied)
     )
     SELECT ok FROM applied`,
    [
      name,
      subscriptionId,
      cycle.periodStart,
      cycle.periodEnd,
      cycle.units,
      cycle.overage,
      cycle.pending,
      cycle.leased,
      cycle.epoch,
      delta,
      bound ?? null,
    ],
  );
  return row?.ok === true;
}

/**
 * A use spent straight through the store (no lease), in a transaction holding its cycle's lock:
 * judged against the exposure the cycle's statement saw and written with that bound re-checked; when
 * the exposure moved past it (or the use was refused for exposure), judged again under the ledger
 * row's lock, as every use once was.
 */
export async function spendDirect(
  tx: Queryable,
  name: string,
  stored: SharedCycle,
  unsettledSeen: bigint,
  request: UsageRequest,
): Promise<Reservation> {
  const seen = applyDirectUsage(stored, unsettledSeen, request);
  if (seen.cycle !== undefined) {
    const delta = seen.unsettled - unsettledSeen;
    if (
      await writeCycleAndExposure(tx, name, request.subscriptionId, seen.cycle, delta, request.maxUnsettled)
    ) {
      return seen.reservation;
    }
  } else if (seen.reservation.ok || seen.reservation.reason !== "ExposureLimit") {
    return seen.reservation;
  }
  const unsettled = await lockUnsettled(tx, name);
  const locked = applyDirectUsage(stored, unsettled, request);
  if (locked.cycle !== undefined) {
    await writeCycleAndExposure(
      tx,
      name,
      request.subscriptionId,
      locked.cycle,
      locked.unsettled - unsettled,
      undefined,
    );
  }
  return locked.reservation;
}

/**
 * Inserts a granted lease, writes its cycle and adds its worst charge to the ledger's exposure, in
 * one statement and only if the exposure then stays within `maxUnsettled` (checked on the row's
 * current value, under its lock): the lease's id, or `undefined` when the bound no longer holds
 * (nothing written). A lease that cannot charge (within the included units) leaves the ledger row
 * alone, as its return does.
 */
export async function insertLease(
  tx: Queryable,
  name: string,
  request: UsageRequest,
  cycle: SharedCycle,
  grant: LeaseGrant,
  ttlMs: number,
): Promise<bigint | undefined> {
  const row = await queryOneParsed(
    tx,
    IdRowSchema,
    `WITH exposure AS (
       UPDATE gate_usage_ledgers SET unsettled = unsettled + $9::numeric
       WHERE name = $1 AND $9::numeric <> 0 AND unsettled + $9::numeric <= $11::numeric
       RETURNING 1
     ), admitted AS (
       SELECT ($9::numeric = 0 OR EXISTS (SELECT 1 FROM exposure)) AS ok
     ), lease AS (
       INSERT INTO gate_usage_leases (ledger, subscription_id, epoch, units, spent, base, included_units,
         unit_price, worst, expires_at)
       SELECT $1, $2::numeric, $3::integer, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::numeric,
         $9::numeric, now() + $10::bigint * interval '1 millisecond'
       FROM admitted WHERE ok
       RETURNING id
     ), cycle AS (
       UPDATE gate_usage_cycles SET period_start = $12, period_end = $13, units = $14, overage = $15,
         pending = $16, leased = $17, epoch = $3::integer, updated_at = now()
       WHERE ledger = $1 AND subscription_id = $2::numeric AND (SELECT ok FROM admitted)
     )
     SELECT id FROM lease`,
    [
      name,
      request.subscriptionId,
      cycle.epoch,
      grant.units,
      BigInt(request.units),
      grant.base,
      grant.includedUnits,
      grant.unitPrice,
      grant.worst,
      ttlMs,
      request.maxUnsettled,
      cycle.periodStart,
      cycle.periodEnd,
      cycle.units,
      cycle.overage,
      cycle.pending,
      cycle.leased,
    ],
  );
  return row?.id;
}
