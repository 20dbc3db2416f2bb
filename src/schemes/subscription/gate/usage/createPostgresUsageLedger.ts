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

/*
 * Parts: postgresUsageRows.ts (row schemas), postgresUsageCycles.ts (the cycle and exposure
 * statements), postgresUsageLeases.ts (grants, spends and ends of leases), postgresUsageBatches.ts (the
 * flush side), groupCommit.ts and concurrencyLimit.ts (the in-process queues); this file opens the
 * ledger, holds the direct use and composes them.
 */
import { randomBytes } from "node:crypto";
import { type Clock, systemClock } from "../../../../protocol/clock.ts";
import { TollgateError } from "../../../../protocol/errors.ts";
import { queryOneParsed, queryParsed } from "../../../../store/queryParsed.ts";
import type { Store } from "../../../../store/store.ts";
import { concurrencyLimit } from "./concurrencyLimit.ts";
import { groupCommit } from "./groupCommit.ts";
import {
  claimPostgresUsageBatch,
  markPostgresBatchSent,
  type PostgresLedgerScope,
  resolvePostgresUsage,
  unresolvedPostgresUsage,
} from "./postgresUsageBatches.ts";
import { lockCycle, spendDirect } from "./postgresUsageCycles.ts";
import { acquireLease, endLeases, reclaimExpiredLeases, spendLeases } from "./postgresUsageLeases.ts";
import {
  CYCLE_COLUMNS,
  CycleRowSchema,
  cycleOf,
  LedgerIdRowSchema,
  publicCycle,
  UnitsRowSchema,
  UnsettledRowSchema,
} from "./postgresUsageRows.ts";
import type { SharedUsageLedger } from "./usageLeases.ts";
import type { Reservation, UsageRequest } from "./usageLedger.ts";

/** Most leases one return transaction ends. */
const MAX_RETURN_BATCH = 100;
/** Grant transactions one ledger runs at once. */
const MAX_CONCURRENT_GRANTS = 2;

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
  const ledger: PostgresLedgerScope = {
    store,
    name,
    ledgerId: await openLedger(store, name),
    clock: options.clock ?? systemClock,
  };
  /**
   * Returns go out together: leases handed back while an earlier return is in flight end in the next
   * transaction, one at a time, so that returns (a burst of them on a flush or a close) take one
   * connection and one lock of the ledger row per batch rather than one each.
   */
  const returns = groupCommit<string>(
    (leaseIds) => endLeases(store, name, leaseIds, "returned", false),
    MAX_RETURN_BATCH,
  );
  /**
   * Grants queue here rather than for a connection: each one writes the ledger row, so more of them in
   * flight only wait on its lock, holding connections that the uses' writes need.
   */
  const grants = concurrencyLimit(MAX_CONCURRENT_GRANTS);

  return {
    // Two spend writes of an instance commit side by side (PostgreSQL flushes concurrent commits
    // together): in gateSubscriptions.ts 1.23x the requests over a socket against one at a time.
    spendWrites: 2,
    reserve: (request) => reserveUse(store, name, request),
    acquire: (request, want, ttlMs) => grants(() => acquireLease(store, name, request, want, ttlMs)),
    spend: (spends) => spendLeases(store, name, spends),
    release: (leaseId) => returns(leaseId),
    reclaimExpired: (limit) => reclaimExpiredLeases(store, name, limit),
    claimBatch: (options) => claimPostgresUsageBatch(ledger, options),
    markBatchSent: (batchId) => markPostgresBatchSent(ledger, batchId),
    resolve: (outcomes) => resolvePostgresUsage(ledger, outcomes),
    async unsettled() {
      const row = await queryOneParsed(
        store,
        UnsettledRowSchema,
        "SELECT unsettled FROM gate_usage_ledgers WHERE name = $1",
        [name],
      );
      return row?.unsettled ?? 0n;
    },
    unresolved: (options) => unresolvedPostgresUsage(ledger, options),
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

/** Creates the ledger `name` if it is new; answers its `ledger_id`. */
async function openLedger(store: Store, name: string): Promise<string> {
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
  return ledgerRow.ledger_id;
}

/**
 * A use spent straight through the store. Fast path, one statement and no transaction: a use within
 * the included units of the cycle already stored for this very period, with no lease out, is a
 * conditional increment (what `applyDirectUsage` does then). Any other use runs in a transaction
 * holding the subscription's cycle lock (`spendDirect`).
 */
async function reserveUse(store: Store, name: string, request: UsageRequest): Promise<Reservation> {
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
      name,
      request.subscriptionId,
      request.periodStart,
      request.periodEnd,
    );
    return spendDirect(tx, name, cycle, unsettledSeen, request);
  });
}
