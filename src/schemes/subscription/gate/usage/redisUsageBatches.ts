/**
 * The flush side of the Redis usage ledger, following the PostgreSQL ledger: a pending charge goes into
 * one batch, a stale batch is resent with the same refs (`usageRef`), a resolved item lowers
 * `unsettled` once.
 */

import { type RedisLedger, text } from "./redisLedger.ts";
import {
  BATCH_ITEMS_LUA,
  CLAIM_LUA,
  ITEMS_LUA,
  MARK_LUA,
  RESOLVE_LUA,
  UNRESOLVED_LUA,
} from "./redisUsageScripts.ts";
import { type UsageBatch, type UsageBatchItem, type UsageOutcome, usageRef } from "./usageLedger.ts";

/**
 * Puts every pending charge into a new batch (at most `maxItems` subscriptions), or hands back a batch
 * claimed earlier and not marked sent within `staleMs`; records its items.
 */
export async function claimRedisUsageBatch(
  ledger: RedisLedger,
  { maxItems, staleMs }: { maxItems: number; staleMs: number },
): Promise<UsageBatch | undefined> {
  const { p, ledgerId } = ledger;
  const now = ledger.clock.now();
  const reply = (await ledger.run(
    CLAIM_LUA,
    [ledger.ledgerKey, ledger.claimedKey, ledger.pendingKey],
    [String(now), String(now - staleMs), String(maxItems), `${p}b:`, `${p}c:`],
  )) as unknown[];
  if (reply.length === 0) return undefined;
  const id = text(reply[0]);
  const items: UsageBatchItem[] = text(reply[1])
    .split(",")
    .filter((entry) => entry.length > 0)
    .map((entry) => {
      const [sub, amount] = entry.split(":");
      const subscriptionId = BigInt(sub ?? "0");
      return {
        ref: usageRef(ledgerId, id, subscriptionId),
        subscriptionId,
        amount: BigInt(amount ?? "0"),
      };
    });
  await ledger.run(
    ITEMS_LUA,
    [],
    [`${p}i:`, id, ...items.flatMap((i) => [i.ref, i.subscriptionId.toString(), i.amount.toString()])],
  );
  return { id, items };
}

/** Marks a claimed batch and its claimed items sent. */
export async function markRedisBatchSent(ledger: RedisLedger, batchId: string): Promise<void> {
  const { p, ledgerId } = ledger;
  const items = text(await ledger.run(BATCH_ITEMS_LUA, [`${p}b:${batchId}`], []));
  const refs = items
    .split(",")
    .filter((entry) => entry.length > 0)
    .map((entry) => usageRef(ledgerId, batchId, BigInt(entry.split(":")[0] ?? "0")));
  await ledger.run(
    MARK_LUA,
    [`${p}b:${batchId}`, ledger.claimedKey, ledger.sentKey],
    [batchId, String(ledger.clock.now()), `${p}i:`, ...refs],
  );
}

/** Records items' outcomes; answers how many were resolved now (not before). */
export async function resolveRedisUsage(
  ledger: RedisLedger,
  outcomes: readonly UsageOutcome[],
): Promise<number> {
  if (outcomes.length === 0) return 0;
  return Number(
    await ledger.run(
      RESOLVE_LUA,
      [ledger.ledgerKey, ledger.sentKey],
      [`${ledger.p}i:`, ...outcomes.flatMap((o) => [o.ref, o.outcome])],
    ),
  );
}

/** Items sent at least `olderThanMs` ago and not yet resolved, oldest first. */
export async function unresolvedRedisUsage(
  ledger: RedisLedger,
  { olderThanMs, limit }: { olderThanMs: number; limit: number },
): Promise<UsageBatchItem[]> {
  const rows = (await ledger.run(
    UNRESOLVED_LUA,
    [ledger.sentKey],
    [String(ledger.clock.now() - olderThanMs), String(limit), `${ledger.p}i:`],
  )) as unknown[][];
  return rows.map(([ref, sub, amount]) => ({
    ref: text(ref),
    subscriptionId: BigInt(text(sub) || "0"),
    amount: BigInt(text(amount) || "0"),
  }));
}
