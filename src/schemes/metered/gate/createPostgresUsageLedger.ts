/**
 * A usage ledger shared by every gate instance using one database (PGlite or PostgreSQL; tables of
 * migrations 0050 and 0103). It leases allowance (`acquire` / `spend` / `release`, see usageLeases.ts);
 * wrap it in `createLeasedUsageLedger` so that uses are spent from leases.
 *
 * - A use within the included units is one conditional `UPDATE`; any other use, a grant and a return
 *   run in one transaction holding the subscription's cycle row lock (a return: its lease's row first),
 *   and write the ledger row — the exposure every instance shares — only in their last statement, so
 *   that row is locked for that statement and the commit, never across a round trip. The exposure is
 *   read without a lock and its bound re-checked where it is written; only when it moved past the bound
 *   does the transaction take the row's lock and decide again.
 * - Returns are grouped (one transaction ends every lease handed back meanwhile) and grants run at most
 *   two at a time, so that a burst of either waits in the process, not on connections the uses' spends
 *   need.
 * - Claiming a batch skips locked rows instead of waiting (`FOR UPDATE SKIP LOCKED`), so a flush never
 *   blocks requests and instances flushing together split the work.
 */
import { randomBytes } from "node:crypto";
import { z } from "zod";
import { type Clock, systemClock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../../store/queryParsed.ts";
import type { Queryable, Store } from "../../../store/store.ts";
import {
  applyDirectUsage,
  endLease,
  firstUseOf,
  grantSize,
  type LeaseGrant,
  type SharedCycle,
  type SharedUsageLedger,
  type StoredLease,
} from "./usageLeases.ts";
import {
  type Reservation,
  type UsageBatchItem,
  type UsageCycle,
  type UsageRequest,
  usageRef,
} from "./usageLedger.ts";

const CycleRowSchema = z.object({
  period_start: SafeIntColumnSchema,
  period_end: SafeIntColumnSchema,
  units: BigintColumnSchema,
  overage: BigintColumnSchema,
  pending: BigintColumnSchema,
  leased: BigintColumnSchema,
  epoch: SafeIntColumnSchema,
});

const CYCLE_COLUMNS = "period_start, period_end, units, overage, pending, leased, epoch";

const LeaseRowSchema = z.object({
  subscription_id: BigintColumnSchema,
  epoch: SafeIntColumnSchema,
  units: BigintColumnSchema,
  spent: BigintColumnSchema,
  base: BigintColumnSchema,
  included_units: BigintColumnSchema,
  unit_price: BigintColumnSchema,
  worst: BigintColumnSchema,
});

/** Rows of one or two columns, parsed with schemas built once (a zod object schema compiles its parser on first use). */
const IdRowSchema = z.object({ id: BigintColumnSchema });
const SerialRowSchema = z.object({ id: SafeIntColumnSchema });
const UnitsRowSchema = z.object({ units: BigintColumnSchema });
const UnsettledRowSchema = z.object({ unsettled: BigintColumnSchema });
const CountRowSchema = z.object({ n: SafeIntColumnSchema });
const WrittenRowSchema = z.object({ ok: z.boolean() });
const LedgerIdRowSchema = z.object({ ledger_id: z.string() });
const PendingRowSchema = z.object({ subscription_id: BigintColumnSchema, pending: BigintColumnSchema });
/** The cycle row locked by `lockCycle`, with the ledger's exposure as this transaction's snapshot saw it. */
const LockedCycleRowSchema = CycleRowSchema.extend({ ledger_unsettled: BigintColumnSchema });

const EndedLeaseRowSchema = LeaseRowSchema.extend({ id: BigintColumnSchema });
const KeyedCycleRowSchema = CycleRowSchema.extend({ subscription_id: BigintColumnSchema });

/** Most leases one return transaction ends. */
const MAX_RETURN_BATCH = 100;
/** Grant transactions one ledger runs at once. */
const MAX_CONCURRENT_GRANTS = 2;

const ItemRowSchema = z.object({
  ref: z.string(),
  subscription_id: BigintColumnSchema,
  amount: BigintColumnSchema,
});

const cycleOf = (row: z.output<typeof CycleRowSchema>): SharedCycle => ({
  periodStart: row.period_start,
  periodEnd: row.period_end,
  units: row.units,
  overage: row.overage,
  pending: row.pending,
  leased: row.leased,
  epoch: row.epoch,
});

const publicCycle = ({ leased: _l, epoch: _e, ...cycle }: SharedCycle): UsageCycle => cycle;

/**
 * Opens (creating if needed) the ledger `name` in `store`. Gates that count one API's usage together
 * share a name; the default suits one API per database.
 *
 * @example
 * const store = await createStore({ databaseUrl: env.DATABASE_URL });
 * const gate = paymentGate({ …, usageLedger: await createPostgresUsageLedger(store) });
 */
export async function createPostgresUsageLedger(
  store: Store,
  options: { name?: string; clock?: Clock } = {},
): Promise<SharedUsageLedger> {
  const name = options.name ?? "default";
  const clock = options.clock ?? systemClock;
  if (name.length === 0 || name.length > 128) {
    throw new TollgateError("InvalidRequest", "usage ledger name must be 1..128 characters");
  }
  await store.query(
    "INSERT INTO gate_usage_ledgers (name, ledger_id) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
    [name, randomBytes(16).toString("hex")],
  );
  const ledgerRow = await queryOneParsed(
    store,
    LedgerIdRowSchema,
    "SELECT ledger_id FROM gate_usage_ledgers WHERE name = $1",
    [name],
  );
  if (ledgerRow === undefined) throw new TollgateError("Internal", "usage ledger row vanished");
  const ledgerId = ledgerRow.ledger_id;

  /**
   * The subscription's cycle row, created if missing, locked until the transaction ends; with the
   * ledger's exposure as this statement's snapshot saw it (not locked: a grant re-checks its bound
   * where it writes, see `insertLease`).
   */
  const lockCycle = async (tx: Queryable, subscriptionId: bigint, periodStart: number, periodEnd: number) => {
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
  };
  // FOR NO KEY UPDATE, not FOR UPDATE: inserting a cycle or lease row takes a KEY SHARE lock on the
  // ledger row (the foreign key), which FOR UPDATE conflicts with — two uses of new subscriptions
  // would each hold one and wait for the other's (a deadlock PostgreSQL then breaks with an error).
  const lockUnsettled = async (tx: Queryable): Promise<bigint> => {
    const ledger = await queryOneParsed(
      tx,
      UnsettledRowSchema,
      "SELECT unsettled FROM gate_usage_ledgers WHERE name = $1 FOR NO KEY UPDATE",
      [name],
    );
    return ledger?.unsettled ?? 0n;
  };
  /**
   * Writes a cycle and moves the ledger's exposure by `delta`, in one statement that is the
   * transaction's last before its commit: the ledger row, which every instance's grants, charges and
   * returns update, stays locked for that statement and the commit only, never across a round trip of
   * the caller's. With a `bound`, nothing is written unless the exposure stays within it (checked on
   * the row's current value, under its lock); answers whether it was written. A `delta` of 0 leaves
   * the ledger row alone.
   */
  const writeCycleAndExposure = async (
    tx: Queryable,
    subscriptionId: bigint,
    cycle: SharedCycle,
    delta: bigint,
    bound: bigint | undefined,
  ): Promise<boolean> => {
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
  };

  /**
   * A use spent straight through the store (no lease), in a transaction holding its cycle's lock:
   * judged against the exposure the cycle's statement saw and written with that bound re-checked; when
   * the exposure moved past it (or the use was refused for exposure), judged again under the ledger
   * row's lock, as every use once was.
   */
  const spendDirect = async (
    tx: Queryable,
    stored: SharedCycle,
    unsettledSeen: bigint,
    request: UsageRequest,
  ): Promise<Reservation> => {
    const seen = applyDirectUsage(stored, unsettledSeen, request);
    if (seen.cycle !== undefined) {
      const delta = seen.unsettled - unsettledSeen;
      if (await writeCycleAndExposure(tx, request.subscriptionId, seen.cycle, delta, request.maxUnsettled)) {
        return seen.reservation;
      }
    } else if (seen.reservation.ok || seen.reservation.reason !== "ExposureLimit") {
      return seen.reservation;
    }
    const unsettled = await lockUnsettled(tx);
    const locked = applyDirectUsage(stored, unsettled, request);
    if (locked.cycle !== undefined) {
      await writeCycleAndExposure(
        tx,
        request.subscriptionId,
        locked.cycle,
        locked.unsettled - unsettled,
        undefined,
      );
    }
    return locked.reservation;
  };

  /**
   * Inserts a granted lease, writes its cycle and adds its worst charge to the ledger's exposure, in
   * one statement and only if the exposure then stays within `maxUnsettled` (checked on the row's
   * current value, under its lock): the lease's id, or `undefined` when the bound no longer holds
   * (nothing written). A lease that cannot charge (within the included units) leaves the ledger row
   * alone, as its return does.
   */
  const insertLease = async (
    tx: Queryable,
    request: UsageRequest,
    cycle: SharedCycle,
    grant: LeaseGrant,
    ttlMs: number,
  ): Promise<bigint | undefined> => {
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
  };

  /**
   * Ends leases (returned or reclaimed) in one transaction: the leases, fenced on their state and
   * locked in id order; then their cycles' locks, in subscription order; then every cycle and the
   * exposure in one statement. Each block's worst charge leaves the exposure and its real charge
   * enters it; leases of one subscription end into its cycle one after the other, in id order, as
   * separate transactions would. Answers how many ended.
   */
  const endLeases = (leaseIds: readonly string[], state: "returned" | "reclaimed", onlyExpired: boolean) =>
    store.transaction(async (tx) => {
      const leases = await queryParsed(
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
      const written = [...cycles];
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
      return leases.length;
    });

  /**
   * Returns go out together: leases handed back while an earlier return is in flight end in the next
   * transaction, one at a time, so that returns (a burst of them on a flush or a close) take one
   * connection and one lock of the ledger row per batch rather than one each.
   */
  const returns = groupCommit<string>((leaseIds) => endLeases(leaseIds, "returned", false), MAX_RETURN_BATCH);
  /**
   * Grants queue here rather than for a connection: each one writes the ledger row, so more of them in
   * flight only wait on its lock, holding connections that the uses' writes need.
   */
  const grants = concurrencyLimit(MAX_CONCURRENT_GRANTS);

  return {
    // Two spend writes of an instance commit side by side (PostgreSQL flushes concurrent commits
    // together): in gateSubscriptions.ts 1.23x the requests over a socket against one at a time.
    spendWrites: 2,
    async reserve(request) {
      // Fast path, one statement and no transaction: a use within the included units of the cycle
      // already stored for this very period, with no lease out, is a conditional increment (what
      // `applyDirectUsage` does then).
      const units = BigInt(request.units);
      // A direct charge (deductAllowance) always takes the locked path below.
      const fast =
        (request.charge ?? 0n) > 0n
          ? []
          : await queryParsed(
              store,
              UnitsRowSchema,
              `UPDATE gate_usage_cycles SET units = units + $5, updated_at = now()
         WHERE ledger = $1 AND subscription_id = $2 AND period_start = $3 AND period_end = $4
           AND units + leased + $5::bigint <= $6::numeric
         RETURNING units + leased AS units`,
              [
                name,
                request.subscriptionId,
                request.periodStart,
                request.periodEnd,
                units,
                request.includedUnits,
              ],
            );
      const counted = fast[0];
      if (counted !== undefined) return { ok: true, unitsUsed: counted.units, charge: 0n };
      return store.transaction(async (tx) => {
        const { cycle, unsettledSeen } = await lockCycle(
          tx,
          request.subscriptionId,
          request.periodStart,
          request.periodEnd,
        );
        return spendDirect(tx, cycle, unsettledSeen, request);
      });
    },

    acquire(request, want, ttlMs) {
      return grants(() =>
        store.transaction(async (tx) => {
          const { cycle: stored, unsettledSeen } = await lockCycle(
            tx,
            request.subscriptionId,
            request.periodStart,
            request.periodEnd,
          );
          const units = BigInt(request.units);
          // Sized against the exposure the cycle's statement saw; written only if the bound still holds,
          // else sized again under the ledger row's lock.
          for (const underLock of [false, true]) {
            const unsettled = underLock ? await lockUnsettled(tx) : unsettledSeen;
            const granted = grantSize(stored, unsettled, request, BigInt(want));
            if (granted === undefined) {
              return { lease: undefined, reservation: await spendDirect(tx, stored, unsettled, request) };
            }
            const { cycle, grant } = granted;
            const id = await insertLease(tx, request, cycle, grant, ttlMs);
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
          throw new TollgateError(
            "Internal",
            "a usage lease sized under the ledger row's lock was not written",
          );
        }),
      );
    },

    async spend(spends) {
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
    },

    release: (leaseId) => returns(leaseId),

    async reclaimExpired(limit) {
      const expired = await queryParsed(
        store,
        IdRowSchema,
        `SELECT id FROM gate_usage_leases WHERE ledger = $1 AND state = 'active' AND expires_at <= now()
         ORDER BY expires_at LIMIT $2`,
        [name, limit],
      );
      if (expired.length === 0) return 0;
      return endLeases(
        expired.map(({ id }) => id.toString()),
        "reclaimed",
        true,
      );
    },

    claimBatch({ maxItems, staleMs }) {
      const now = clock.now();
      return store.transaction(async (tx) => {
        const stale = await queryOneParsed(
          tx,
          SerialRowSchema,
          `SELECT id FROM gate_usage_batches
           WHERE ledger = $1 AND status = 'claimed' AND claimed_at_ms <= $2
           ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`,
          [name, now - staleMs],
        );
        if (stale !== undefined) {
          await tx.query("UPDATE gate_usage_batches SET claimed_at_ms = $2 WHERE id = $1", [stale.id, now]);
          const items = await queryParsed(
            tx,
            ItemRowSchema,
            "SELECT ref, subscription_id, amount FROM gate_usage_items WHERE batch_id = $1 ORDER BY ref",
            [stale.id],
          );
          return { id: String(stale.id), items: items.map(itemOf) };
        }
        const picked = await queryParsed(
          tx,
          PendingRowSchema,
          `SELECT subscription_id, pending FROM gate_usage_cycles
           WHERE ledger = $1 AND pending > 0
           ORDER BY subscription_id LIMIT $2 FOR UPDATE SKIP LOCKED`,
          [name, maxItems],
        );
        if (picked.length === 0) return undefined;
        const batch = await queryOneParsed(
          tx,
          SerialRowSchema,
          "INSERT INTO gate_usage_batches (ledger, claimed_at_ms) VALUES ($1, $2) RETURNING id",
          [name, now],
        );
        if (batch === undefined) throw new TollgateError("Internal", "usage batch insert returned no row");
        const id = String(batch.id);
        const items: UsageBatchItem[] = picked.map((row) => ({
          ref: usageRef(ledgerId, id, row.subscription_id),
          subscriptionId: row.subscription_id,
          amount: row.pending,
        }));
        await tx.query(
          `UPDATE gate_usage_cycles SET pending = 0, updated_at = now()
           WHERE ledger = $1 AND subscription_id = ANY($2::numeric[])`,
          [name, items.map((item) => item.subscriptionId.toString())],
        );
        await tx.query(
          `INSERT INTO gate_usage_items (ref, ledger, batch_id, subscription_id, amount)
           SELECT unnest($3::text[]), $1, $2, unnest($4::numeric[]), unnest($5::numeric[])`,
          [
            name,
            batch.id,
            items.map((item) => item.ref),
            items.map((item) => item.subscriptionId.toString()),
            items.map((item) => item.amount.toString()),
          ],
        );
        return { id, items };
      });
    },

    async markBatchSent(batchId) {
      const now = clock.now();
      await store.transaction(async (tx) => {
        const rows = await tx.query(
          "UPDATE gate_usage_batches SET status = 'sent' WHERE id = $1 AND ledger = $2 AND status = 'claimed' RETURNING id",
          [batchId, name],
        );
        if (rows.length === 0) return;
        await tx.query(
          "UPDATE gate_usage_items SET status = 'sent', sent_at_ms = $2 WHERE batch_id = $1 AND status = 'claimed'",
          [batchId, now],
        );
      });
    },

    async resolve(outcomes) {
      if (outcomes.length === 0) return 0;
      // One statement: the items resolved now (not before) are subtracted from the exposure, once.
      const rows = await queryParsed(
        store,
        CountRowSchema,
        `WITH outcome AS (
           SELECT unnest($2::text[]) AS ref, unnest($3::text[]) AS status
         ), done AS (
           UPDATE gate_usage_items i SET status = o.status, resolved_at = now()
           FROM outcome o
           WHERE i.ref = o.ref AND i.ledger = $1 AND i.status IN ('claimed', 'sent')
           RETURNING i.amount
         ), lowered AS (
           UPDATE gate_usage_ledgers SET unsettled = unsettled - (SELECT coalesce(sum(amount), 0) FROM done)
           WHERE name = $1 RETURNING 1
         )
         SELECT count(*) AS n FROM done`,
        [name, outcomes.map((o) => o.ref), outcomes.map((o) => o.outcome)],
      );
      return rows[0]?.n ?? 0;
    },

    async unsettled() {
      const row = await queryOneParsed(
        store,
        UnsettledRowSchema,
        "SELECT unsettled FROM gate_usage_ledgers WHERE name = $1",
        [name],
      );
      return row?.unsettled ?? 0n;
    },

    async unresolved({ olderThanMs, limit }) {
      const rows = await queryParsed(
        store,
        ItemRowSchema,
        `SELECT ref, subscription_id, amount FROM gate_usage_items
         WHERE ledger = $1 AND status = 'sent' AND sent_at_ms <= $2
         ORDER BY sent_at_ms, ref LIMIT $3`,
        [name, clock.now() - olderThanMs, limit],
      );
      return rows.map(itemOf);
    },

    async cycle(subscriptionId) {
      const row = await queryOneParsed(
        store,
        CycleRowSchema,
        `SELECT ${CYCLE_COLUMNS} FROM gate_usage_cycles WHERE ledger = $1 AND subscription_id = $2`,
        [name, subscriptionId],
      );
      return row === undefined ? undefined : publicCycle(cycleOf(row));
    },
  };
}

function itemOf(row: z.output<typeof ItemRowSchema>): UsageBatchItem {
  return { ref: row.ref, subscriptionId: row.subscription_id, amount: row.amount };
}

/**
 * Group commit: items added while a run of `write` is in flight go into the next run (at most
 * `maxBatch` each), one run at a time; each `add` settles with its run.
 */
function groupCommit<T>(
  write: (items: T[]) => Promise<unknown>,
  maxBatch: number,
): (item: T) => Promise<void> {
  let queue: { item: T; resolve(): void; reject(error: unknown): void }[] = [];
  let running = false;
  const drain = async () => {
    while (queue.length > 0) {
      const batch = queue.slice(0, maxBatch);
      queue = queue.slice(maxBatch);
      try {
        await write(batch.map((entry) => entry.item));
        for (const entry of batch) entry.resolve();
      } catch (error) {
        for (const entry of batch) entry.reject(error);
      }
    }
    running = false;
  };
  return (item) =>
    new Promise<void>((resolve, reject) => {
      queue.push({ item, resolve, reject });
      if (!running) {
        running = true;
        queueMicrotask(() => void drain());
      }
    });
}

/** Runs at most `limit` of the functions given to it at once, the others in arrival order. */
function concurrencyLimit(limit: number): <T>(run: () => Promise<T>) => Promise<T> {
  let active = 0;
  const waiting: (() => void)[] = [];
  return async (run) => {
    if (active >= limit) await new Promise<void>((resolve) => waiting.push(resolve));
    else active++;
    try {
      return await run();
    } finally {
      const next = waiting.shift();
      if (next === undefined) active--;
      else next();
    }
  };
}
