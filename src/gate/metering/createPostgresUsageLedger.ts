/**
 * A usage ledger shared by every gate instance using one database (PGlite or PostgreSQL; tables of
 * migrations 0050 and 0103). It leases allowance (`acquire` / `spend` / `release`, see usageLeases.ts);
 * wrap it in `createLeasedUsageLedger` so that uses are spent from leases. A use within the included units is one conditional `UPDATE`; any other runs in one
 * transaction holding the subscription's cycle row lock
 * (taken by the upsert that also creates it), and the ledger row lock when it charges, always in that
 * order; claiming a batch skips locked rows instead of waiting (`FOR UPDATE SKIP LOCKED`), so a flush
 * never blocks requests and instances flushing together split the work.
 */
import { randomBytes } from "node:crypto";
import { z } from "zod";
import { type Clock, systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Queryable, Store } from "../../store/store.ts";
import {
  applyDirectUsage,
  endLease,
  firstUseOf,
  grantSize,
  type SharedCycle,
  type SharedUsageLedger,
  type StoredLease,
} from "./usageLeases.ts";
import { type UsageBatchItem, type UsageCycle, usageRef } from "./usageLedger.ts";

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
    z.object({ ledger_id: z.string() }),
    "SELECT ledger_id FROM gate_usage_ledgers WHERE name = $1",
    [name],
  );
  if (ledgerRow === undefined) throw new TollgateError("Internal", "usage ledger row vanished");
  const ledgerId = ledgerRow.ledger_id;

  /** The subscription's cycle row, created if missing, locked until the transaction ends. */
  const lockCycle = async (tx: Queryable, subscriptionId: bigint, periodStart: number, periodEnd: number) => {
    const row = await queryOneParsed(
      tx,
      CycleRowSchema,
      `INSERT INTO gate_usage_cycles AS c (ledger, subscription_id, period_start, period_end)
       VALUES ($1, $2, $3, $4)
       ON CONFLICT (ledger, subscription_id) DO UPDATE SET ledger = c.ledger
       RETURNING ${CYCLE_COLUMNS.split(", ")
         .map((c) => `c.${c}`)
         .join(", ")}`,
      [name, subscriptionId, periodStart, periodEnd],
    );
    if (row === undefined) throw new TollgateError("Internal", "usage cycle upsert returned no row");
    return cycleOf(row);
  };
  // FOR NO KEY UPDATE, not FOR UPDATE: inserting a cycle or lease row takes a KEY SHARE lock on the
  // ledger row (the foreign key), which FOR UPDATE conflicts with — two uses of new subscriptions
  // would each hold one and wait for the other's (a deadlock PostgreSQL then breaks with an error).
  const lockUnsettled = async (tx: Queryable): Promise<bigint> => {
    const ledger = await queryOneParsed(
      tx,
      z.object({ unsettled: BigintColumnSchema }),
      "SELECT unsettled FROM gate_usage_ledgers WHERE name = $1 FOR NO KEY UPDATE",
      [name],
    );
    return ledger?.unsettled ?? 0n;
  };
  const writeCycle = (tx: Queryable, subscriptionId: bigint, cycle: SharedCycle) =>
    tx.query(
      `UPDATE gate_usage_cycles SET period_start = $3, period_end = $4, units = $5, overage = $6,
         pending = $7, leased = $8, epoch = $9, updated_at = now()
       WHERE ledger = $1 AND subscription_id = $2`,
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
      ],
    );
  const writeUnsettled = (tx: Queryable, unsettled: bigint) =>
    tx.query("UPDATE gate_usage_ledgers SET unsettled = $2 WHERE name = $1", [name, unsettled]);

  /** Ends one lease (returned or reclaimed) in one transaction: cycle lock, lease, ledger, in that order. */
  const endOne = (leaseId: string, state: "returned" | "reclaimed", onlyExpired: boolean) =>
    store.transaction(async (tx) => {
      const head = await queryOneParsed(
        tx,
        z.object({ subscription_id: BigintColumnSchema }),
        "SELECT subscription_id FROM gate_usage_leases WHERE id = $1 AND ledger = $2 AND state = 'active'",
        [leaseId, name],
      );
      if (head === undefined) return false;
      const cycleRow = await queryOneParsed(
        tx,
        CycleRowSchema,
        `SELECT ${CYCLE_COLUMNS} FROM gate_usage_cycles WHERE ledger = $1 AND subscription_id = $2 FOR UPDATE`,
        [name, head.subscription_id],
      );
      const lease = await queryOneParsed(
        tx,
        LeaseRowSchema,
        `UPDATE gate_usage_leases SET state = $3, ended_at = now()
         WHERE id = $1 AND ledger = $2 AND state = 'active' ${onlyExpired ? "AND expires_at <= now()" : ""}
         RETURNING subscription_id, epoch, units, spent, base, included_units, unit_price, worst`,
        [leaseId, name, state],
      );
      if (lease === undefined) return false;
      const unsettled = await lockUnsettled(tx);
      const ended = endLease(
        cycleRow === undefined ? undefined : cycleOf(cycleRow),
        unsettled,
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
      if (ended.cycle !== undefined) await writeCycle(tx, lease.subscription_id, ended.cycle);
      await writeUnsettled(tx, ended.unsettled);
      return true;
    });

  return {
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
              z.object({ units: BigintColumnSchema }),
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
        const stored = await lockCycle(tx, request.subscriptionId, request.periodStart, request.periodEnd);
        // First without the exposure figure: only a use that charges needs the ledger row (and its lock).
        let result = applyDirectUsage(stored, 0n, { ...request, maxUnsettled: 2n ** 256n });
        let unsettled: bigint | undefined;
        if (result.reservation.ok && result.reservation.charge > 0n) {
          unsettled = await lockUnsettled(tx);
          result = applyDirectUsage(stored, unsettled, request);
        }
        if (result.cycle !== undefined) {
          await writeCycle(tx, request.subscriptionId, result.cycle);
          if (unsettled !== undefined && result.unsettled !== unsettled)
            await writeUnsettled(tx, result.unsettled);
        }
        return result.reservation;
      });
    },

    acquire(request, want, ttlMs) {
      return store.transaction(async (tx) => {
        const stored = await lockCycle(tx, request.subscriptionId, request.periodStart, request.periodEnd);
        const unsettled = await lockUnsettled(tx);
        const granted = grantSize(stored, unsettled, request, BigInt(want));
        if (granted === undefined) {
          const direct = applyDirectUsage(stored, unsettled, request);
          if (direct.cycle !== undefined) {
            await writeCycle(tx, request.subscriptionId, direct.cycle);
            if (direct.unsettled !== unsettled) await writeUnsettled(tx, direct.unsettled);
          }
          return { lease: undefined, reservation: direct.reservation };
        }
        const { cycle, grant } = granted;
        const units = BigInt(request.units);
        const row = await queryOneParsed(
          tx,
          z.object({ id: BigintColumnSchema }),
          `INSERT INTO gate_usage_leases (ledger, subscription_id, epoch, units, spent, base, included_units,
             unit_price, worst, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now() + $10 * interval '1 millisecond')
           RETURNING id`,
          [
            name,
            request.subscriptionId,
            cycle.epoch,
            grant.units,
            units,
            grant.base,
            grant.includedUnits,
            grant.unitPrice,
            grant.worst,
            ttlMs,
          ],
        );
        if (row === undefined) throw new TollgateError("Internal", "usage lease insert returned no row");
        await writeCycle(tx, request.subscriptionId, cycle);
        await writeUnsettled(tx, unsettled + grant.worst);
        const lease: StoredLease = {
          ...grant,
          id: row.id.toString(),
          subscriptionId: request.subscriptionId,
          epoch: cycle.epoch,
          spent: units,
        };
        return { lease, reservation: firstUseOf(grant, units) };
      });
    },

    async spend(spends) {
      if (spends.length === 0) return new Set();
      const rows = await queryParsed(
        store,
        z.object({ id: BigintColumnSchema }),
        `UPDATE gate_usage_leases l SET spent = l.spent + s.units
         FROM (SELECT unnest($2::bigint[]) AS id, unnest($3::bigint[]) AS units) s
         WHERE l.id = s.id AND l.ledger = $1 AND l.state = 'active' AND l.expires_at > now()
           AND l.spent + s.units <= l.units
         RETURNING l.id`,
        [name, spends.map((s) => s.leaseId), spends.map((s) => s.units.toString())],
      );
      return new Set(rows.map((row) => row.id.toString()));
    },

    async release(leaseId) {
      await endOne(leaseId, "returned", false);
    },

    async reclaimExpired(limit) {
      const expired = await queryParsed(
        store,
        z.object({ id: BigintColumnSchema }),
        `SELECT id FROM gate_usage_leases WHERE ledger = $1 AND state = 'active' AND expires_at <= now()
         ORDER BY expires_at LIMIT $2`,
        [name, limit],
      );
      let reclaimed = 0;
      for (const { id } of expired) if (await endOne(id.toString(), "reclaimed", true)) reclaimed++;
      return reclaimed;
    },

    claimBatch({ maxItems, staleMs }) {
      const now = clock.now();
      return store.transaction(async (tx) => {
        const stale = await queryOneParsed(
          tx,
          z.object({ id: SafeIntColumnSchema }),
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
          z.object({ subscription_id: BigintColumnSchema, pending: BigintColumnSchema }),
          `SELECT subscription_id, pending FROM gate_usage_cycles
           WHERE ledger = $1 AND pending > 0
           ORDER BY subscription_id LIMIT $2 FOR UPDATE SKIP LOCKED`,
          [name, maxItems],
        );
        if (picked.length === 0) return undefined;
        const batch = await queryOneParsed(
          tx,
          z.object({ id: SafeIntColumnSchema }),
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
        z.object({ n: SafeIntColumnSchema }),
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
        z.object({ unsettled: BigintColumnSchema }),
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
