/**
 * The renewal keeper (DESIGN.md §4): charges due subscriptions with `collectMany`, so renewals need
 * no action from subscribers or providers.
 *
 * - "Due" is judged against the chain's time (the latest block's timestamp), never the wall clock: a
 *   devnet's time is moved by `advanceTime`, and a real chain's clock is the one the contract uses.
 * - Outcomes come from the chain: the contract renews (SubscriptionRenewed) or marks the subscription
 *   PastDue (RenewalFailed) without reverting, and the indexer turns those logs into
 *   `subscription.renewed` / `subscription.renewal_failed`. The keeper itself writes no events.
 * - A failed pull is retried for the same period after `retryAfterSeconds` of chain time, at most
 *   `maxAttempts` times; a PastDue subscription is not charged again on every run.
 * - Collecting is idempotent on chain (a renewed subscription is no longer due and `collectMany`
 *   skips it), so a keeper that dies mid-run is simply run again. A lease in the store lets one
 *   facilitator instance at a time run it, so instances sharing a database do not waste gas.
 * - One subscription cannot hold back the others. Anyone may create a plan in any token, so the keeper
 *   collects only subscriptions whose plan token is one this facilitator serves (`ctx.tokens`); and a
 *   batch that would revert as a whole (a hostile token on a manager deployed before per-item
 *   isolation, a call that needs absurd gas) is split in halves until the items that revert alone are
 *   found. Those are set aside with the back-off of a failed pull, so they do not sit at the head of
 *   every later run, and every other item of the batch is collected in the same run.
 */
import { randomBytes } from "node:crypto";
import { encodeFunctionData, type Hash, type Hex, type Log } from "viem";
import { z } from "zod";
import { subscriptionManagerAbi } from "../../chain/contracts/artifacts/SubscriptionManager.ts";
import { decodeSubscriptionEvents } from "../../chain/events/decodeSubscriptionEvents.ts";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import { isChainUnreachable } from "../chainErrors.ts";
import type { FacilitatorContext } from "../facilitatorModule.ts";
import { createWakeablePause } from "../wakeablePause.ts";
import { isChainRefusal } from "./chainRefusal.ts";
import type { SubscriptionIndexer } from "./subscriptionIndexer.ts";

export type RenewalKeeperOptions = {
  /** Time between runs of the background loop (default 30 000 ms). */
  intervalMs?: number | undefined;
  /** Subscriptions per `collectMany` transaction (default 50). */
  batchSize?: number | undefined;
  /** Chain seconds before a failed renewal of the same period is tried again (default 86 400). */
  retryAfterSeconds?: number | undefined;
  /** Failed attempts per period after which the keeper leaves the subscription PastDue (default 4). */
  maxAttempts?: number | undefined;
  /** How long a run may hold the lease (default 120 000 ms). */
  leaseMs?: number | undefined;
};

export type KeeperRun = {
  /** The chain time the run judged due-ness by. */
  chainTime: number;
  /** Subscription ids sent to `collectMany`. */
  attempted: string[];
  renewed: string[];
  /** Ids whose pull failed (now PastDue). */
  failed: string[];
  /**
   * Ids whose collection reverts the whole call even alone (found by splitting a batch that would
   * revert); not sent, retried after the back-off of a failed pull.
   */
  isolated: string[];
  transactions: Hash[];
};

export type RenewalKeeper = {
  /** One pass: collects every due subscription now, in batches. */
  runOnce(): Promise<KeeperRun>;
  start(): Promise<void>;
  stop(): Promise<void>;
};

type KeeperContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "gas" | "chainId" | "subscriptionManager" | "logger" | "tokens"
>;

const DueRowSchema = z.object({
  subscription_id: BigintColumnSchema,
  current_period_end: SafeIntColumnSchema,
});
type DueRow = z.infer<typeof DueRowSchema>;

const LEASE_NAME = "renewal-keeper";

/**
 * Gas a batch may need per item before it is treated as poisoned and split. The contract gives each
 * token call 100 000 gas (PULL_GAS) and an honest renewal costs about 50 000 in all; an estimate far
 * above that means an item is burning gas (on a manager without the cap) and would push the batch
 * toward the block's limit.
 */
const MAX_GAS_PER_ITEM = 250_000n;
const BATCH_GAS_OVERHEAD = 100_000n;

export function createRenewalKeeper(
  ctx: KeeperContext,
  deps: { indexer?: Pick<SubscriptionIndexer, "syncOnce"> | undefined } & RenewalKeeperOptions = {},
): RenewalKeeper {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the renewal keeper needs a SubscriptionManager address");
  }
  const manager = ctx.subscriptionManager;
  const intervalMs = deps.intervalMs ?? 30_000;
  const batchSize = deps.batchSize ?? 50;
  const retryAfter = deps.retryAfterSeconds ?? 86_400;
  const maxAttempts = deps.maxAttempts ?? 4;
  const leaseMs = deps.leaseMs ?? 120_000;
  const knownTokens = ctx.tokens.map((token) => token.address.toLowerCase());
  const holder = `${ctx.gas.address.toLowerCase()}:${randomBytes(6).toString("hex")}`;
  const log = ctx.logger.child({ component: "renewal-keeper" });

  let running = false;
  let loopDone: Promise<void> | undefined;
  const sleeper = createWakeablePause();
  let current: Promise<KeeperRun> | undefined;

  async function takeLease(): Promise<boolean> {
    const rows = await ctx.store.query(
      `INSERT INTO worker_leases (name, holder, lease_until) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
       ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until
       WHERE worker_leases.lease_until < now() OR worker_leases.holder = EXCLUDED.holder
       RETURNING holder`,
      [`${LEASE_NAME}:${ctx.chainId}:${manager.toLowerCase()}`, holder, leaseMs],
    );
    return rows.length === 1;
  }

  async function releaseLease(): Promise<void> {
    await ctx.store.query("DELETE FROM worker_leases WHERE name = $1 AND holder = $2", [
      `${LEASE_NAME}:${ctx.chainId}:${manager.toLowerCase()}`,
      holder,
    ]);
  }

  async function dueNow(chainTime: number, exclude: readonly bigint[]) {
    return queryParsed(
      ctx.store,
      DueRowSchema,
      `SELECT s.subscription_id, s.current_period_end
       FROM subscriptions s
       JOIN plans p ON p.chain_id = s.chain_id AND p.manager = s.manager AND p.plan_id = s.plan_id
       LEFT JOIN renewal_attempts a
         ON a.chain_id = s.chain_id AND a.manager = s.manager AND a.subscription_id = s.subscription_id
       WHERE s.chain_id = $1 AND s.manager = $2 AND s.status IN ('Active', 'PastDue')
         AND s.current_period_end <= $3
         AND (a.subscription_id IS NULL OR a.period_end <> s.current_period_end
              OR (a.failures < $4 AND a.next_attempt_at <= $3))
         AND NOT (s.subscription_id = ANY($6::numeric[]))
         AND p.token = ANY($7::text[])
       ORDER BY s.current_period_end, s.subscription_id
       LIMIT $5`,
      [
        ctx.chainId,
        manager.toLowerCase(),
        chainTime,
        maxAttempts,
        batchSize,
        exclude.map(String),
        knownTokens,
      ],
    );
  }

  async function recordOutcomes(
    chainTime: number,
    due: readonly DueRow[],
    logs: Log[],
  ): Promise<{ renewed: string[]; failed: string[] }> {
    const renewed = new Set<string>();
    const failed = new Set<string>();
    for (const event of decodeSubscriptionEvents(logs)) {
      if (event.address.toLowerCase() !== manager.toLowerCase()) continue;
      if (event.eventName === "SubscriptionRenewed") renewed.add(event.args.subscriptionId.toString());
      if (event.eventName === "RenewalFailed") failed.add(event.args.subscriptionId.toString());
    }
    await recordAttempts(chainTime, due, renewed, failed);
    return { renewed: [...renewed], failed: [...failed] };
  }

  /** Clears the attempts of renewed ids and counts a failure (with its back-off) for failed ones. */
  async function recordAttempts(
    chainTime: number,
    due: readonly DueRow[],
    renewed: ReadonlySet<string>,
    failed: ReadonlySet<string>,
  ): Promise<void> {
    await ctx.store.transaction(async (tx) => {
      for (const row of due) {
        const id = row.subscription_id.toString();
        if (renewed.has(id)) {
          await tx.query(
            "DELETE FROM renewal_attempts WHERE chain_id = $1 AND manager = $2 AND subscription_id = $3",
            [ctx.chainId, manager.toLowerCase(), row.subscription_id],
          );
        } else if (failed.has(id)) {
          await tx.query(
            `INSERT INTO renewal_attempts (chain_id, manager, subscription_id, period_end, failures, next_attempt_at)
             VALUES ($1, $2, $3, $4, 1, $5)
             ON CONFLICT (chain_id, manager, subscription_id) DO UPDATE SET
               failures = CASE WHEN renewal_attempts.period_end = EXCLUDED.period_end
                               THEN renewal_attempts.failures + 1 ELSE 1 END,
               period_end = EXCLUDED.period_end, next_attempt_at = EXCLUDED.next_attempt_at, updated_at = now()`,
            [
              ctx.chainId,
              manager.toLowerCase(),
              row.subscription_id,
              row.current_period_end,
              chainTime + retryAfter,
            ],
          );
        }
      }
    });
  }

  /**
   * Whether `collectMany(ids)` would go through as one transaction at a sane cost. A refusal (a revert,
   * out of gas at the block's limit) is an answer; any other error (the chain cannot be asked) throws.
   */
  async function collectable(data: Hex, count: number): Promise<boolean> {
    try {
      const gas = await ctx.publicClient.estimateGas({ account: ctx.gas.address, to: manager, data });
      return gas <= BigInt(count) * MAX_GAS_PER_ITEM + BATCH_GAS_OVERHEAD;
    } catch (error) {
      if (isChainRefusal(error)) return false;
      throw error;
    }
  }

  /**
   * Collects `rows` in one transaction, or, when that would revert as a whole, each half on its own,
   * down to single items: an item that reverts alone is set aside, the rest are collected. A batch of
   * n items with k poisoned ones costs O(k log n) estimates and no reverted transaction.
   */
  async function collectBatch(chainTime: number, rows: readonly DueRow[], result: KeeperRun): Promise<void> {
    const ids = rows.map((row) => row.subscription_id);
    const data = encodeFunctionData({
      abi: subscriptionManagerAbi,
      functionName: "collectMany",
      args: [ids],
    });
    let sent: Awaited<ReturnType<typeof ctx.gas.sendAndWait>> | undefined;
    if (await collectable(data, ids.length)) {
      try {
        sent = await ctx.gas.sendAndWait({ to: manager, data });
      } catch (error) {
        // Refused or reverted although the estimate passed (state moved, or a token that behaves
        // differently when estimated): split like a batch that would revert.
        if (!isChainRefusal(error)) throw error;
        log.warn({ err: error, attempted: ids.length }, "renewal batch refused on chain; splitting it");
      }
    }
    if (sent === undefined) {
      if (rows.length === 1) {
        const id = ids[0]!.toString();
        await recordAttempts(chainTime, rows, new Set(), new Set([id]));
        result.isolated.push(id);
        log.warn({ subscriptionId: id }, "collecting this subscription reverts; set aside until its retry");
        return;
      }
      const half = Math.ceil(rows.length / 2);
      await collectBatch(chainTime, rows.slice(0, half), result);
      await collectBatch(chainTime, rows.slice(half), result);
      return;
    }
    result.transactions.push(sent.hash);
    result.attempted.push(...ids.map(String));
    const outcome = await recordOutcomes(chainTime, rows, sent.logs as Log[]);
    result.renewed.push(...outcome.renewed);
    result.failed.push(...outcome.failed);
    log.info(
      {
        transaction: sent.hash,
        attempted: ids.length,
        renewed: outcome.renewed.length,
        failed: outcome.failed.length,
      },
      "renewals collected",
    );
  }

  async function run(): Promise<KeeperRun> {
    const result: KeeperRun = {
      chainTime: 0,
      attempted: [],
      renewed: [],
      failed: [],
      isolated: [],
      transactions: [],
    };
    // Wait out a run another instance (or this one's loop) is making, rather than skipping.
    for (let waited = 0; !(await takeLease()); waited += 200) {
      if (waited > leaseMs) return result;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    try {
      await deps.indexer?.syncOnce();
      const block = await ctx.publicClient.getBlock({ blockTag: "latest" });
      result.chainTime = Number(block.timestamp);
      const tried: bigint[] = [];
      for (;;) {
        const due = await dueNow(result.chainTime, tried);
        if (due.length === 0) break;
        tried.push(...due.map((row) => row.subscription_id));
        await collectBatch(result.chainTime, due, result);
      }
      if (result.attempted.length > 0) await deps.indexer?.syncOnce();
      return result;
    } finally {
      await releaseLease().catch(() => undefined);
    }
  }

  function runOnce(): Promise<KeeperRun> {
    // One run at a time in this process; a second caller gets the run in progress.
    current ??= run().finally(() => {
      current = undefined;
    });
    return current;
  }

  async function loop(): Promise<void> {
    while (running) {
      try {
        await runOnce();
      } catch (error) {
        if (isChainUnreachable(error)) log.warn("chain unreachable; renewals wait for the next run");
        else log.error({ err: error }, "renewal run failed");
      }
      if (!running) break;
      await sleeper.pause(intervalMs);
    }
  }

  return {
    runOnce,
    async start() {
      if (running) return;
      running = true;
      loopDone = loop();
    },
    async stop() {
      running = false;
      sleeper.wake();
      await loopDone;
    },
  };
}
