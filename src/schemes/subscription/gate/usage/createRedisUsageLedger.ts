/**
 * A usage ledger shared by every gate instance using one Redis, with leased allowance (usageLeases.ts;
 * wrap it in `createLeasedUsageLedger`). Every key of one ledger carries the hash tag `{name}`.
 *
 * - The rules are the TypeScript ones (`applyDirectUsage`, `grantSize`, `endLease`) with bigint money:
 *   a change reads a snapshot, applies the rule, and commits with a Lua compare-and-set on the cycle's
 *   version, the ledger's unsettled figure (and a lease's spent units); a lost race is retried.
 * - Spends into leases are one Lua script for every use in flight: each lease takes its units only
 *   while active, unexpired by Redis's clock (`TIME`) and within its block (fencing).
 * - Batches, items and outcomes follow the PostgreSQL ledger: a pending charge goes into one batch,
 *   a stale batch is resent with the same refs (`usageRef`), a resolved item lowers `unsettled` once.
 *
 * Amounts are stored as decimal integers; `unsettled` is moved by `HINCRBY`, so it must stay below
 * 2^63 smallest units (9.2·10^12 USDC): the ledger bounds `maxUnsettled` there. Durability across a
 * Redis restart is Redis's own (AOF with `appendfsync always` or `everysec`; docs/gate.md).
 */

/*
 * Parts: redisUsageScripts.ts (the Lua scripts), redisLedger.ts (the runner, keys, snapshot and
 * commit), redisUsageLeases.ts (uses, grants, spends and ends of leases), redisUsageBatches.ts (the
 * flush side); this file opens the ledger and composes them.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { createClient } from "redis";
import { type Clock, systemClock } from "../../../../protocol/clock.ts";
import { TollgateError } from "../../../../protocol/errors.ts";
import {
  ledgerKeys,
  type RedisLedger,
  type RedisUsageClient,
  scriptRunner,
  snapshot,
  text,
} from "./redisLedger.ts";
import {
  claimRedisUsageBatch,
  markRedisBatchSent,
  resolveRedisUsage,
  unresolvedRedisUsage,
} from "./redisUsageBatches.ts";
import {
  acquireRedisLease,
  endRedisLease,
  reclaimExpiredRedisLeases,
  reserveRedisUse,
  spendRedisLeases,
} from "./redisUsageLeases.ts";
import { INIT_LEDGER_LUA, LEDGER_ID_LUA, UNSETTLED_LUA } from "./redisUsageScripts.ts";
import type { SharedUsageLedger } from "./usageLeases.ts";
import type { UsageCycle } from "./usageLedger.ts";

export type { RedisUsageClient } from "./redisLedger.ts";

export type RedisUsageLedgerOptions = (
  | { /** `redis://…`: the ledger opens, owns and closes its own client. */ url: string }
  | { /** A connected client owned by the caller. */ client: RedisUsageClient }
) & {
  /** Gates that count one API's usage together share a name (default `default`). */
  name?: string;
  /** Namespace of the keys (default `tollgate:usage:`). */
  prefix?: string;
  clock?: Clock;
  logger?: Logger | undefined;
};

/**
 * Opens the ledger `name` in Redis.
 *
 * @example
 * const shared = await createRedisUsageLedger({ url: env.REDIS_URL, name: "search-api" });
 * const gate = paymentGate({ …, usageLedger: createLeasedUsageLedger({ shared, clock: systemClock }) });
 */
export async function createRedisUsageLedger(
  options: RedisUsageLedgerOptions,
): Promise<SharedUsageLedger & { close(): Promise<void> }> {
  const name = options.name ?? "default";
  if (name.length === 0 || name.length > 128 || /[{}]/.test(name)) {
    throw new TollgateError("InvalidRequest", "usage ledger name must be 1..128 characters without braces");
  }
  const clock = options.clock ?? systemClock;
  const { client, owned } = await connect(options);
  const run = scriptRunner(client);
  const keys = ledgerKeys(options.prefix ?? "tollgate:usage:", name);
  await run(INIT_LEDGER_LUA, [keys.ledgerKey], [randomBytes(16).toString("hex")]);
  const ledgerId = text(await run(LEDGER_ID_LUA, [keys.ledgerKey], []));
  const ledger: RedisLedger = { ...keys, run, ledgerId, clock };

  return {
    reserve: (raw) => reserveRedisUse(ledger, raw),
    acquire: (raw, want, ttlMs) => acquireRedisLease(ledger, raw, want, ttlMs),
    spend: (spends) => spendRedisLeases(ledger, spends),
    async release(leaseId) {
      await endRedisLease(ledger, leaseId, "returned");
    },
    reclaimExpired: (limit) => reclaimExpiredRedisLeases(ledger, limit),
    claimBatch: (options) => claimRedisUsageBatch(ledger, options),
    markBatchSent: (batchId) => markRedisBatchSent(ledger, batchId),
    resolve: (outcomes) => resolveRedisUsage(ledger, outcomes),
    async unsettled() {
      return BigInt(text(await run(UNSETTLED_LUA, [keys.ledgerKey], [])));
    },
    unresolved: (options) => unresolvedRedisUsage(ledger, options),
    async cycle(subscriptionId): Promise<UsageCycle | undefined> {
      const seen = await snapshot(ledger, subscriptionId);
      if (seen.cycle === undefined) return undefined;
      const { leased: _l, epoch: _e, ...cycle } = seen.cycle;
      return cycle;
    },
    async close() {
      await owned?.close();
    },
  };
}

/** The caller's client, or one opened from `url` that the ledger owns and closes. */
async function connect(
  options: RedisUsageLedgerOptions,
): Promise<{ client: RedisUsageClient; owned: { close(): Promise<void> } | undefined }> {
  if (!("url" in options)) return { client: options.client, owned: undefined };
  const created = createClient({ url: options.url });
  created.on("error", (error: unknown) => options.logger?.warn({ err: error }, "Redis usage ledger error"));
  await created.connect();
  return { client: created as unknown as RedisUsageClient, owned: created };
}
