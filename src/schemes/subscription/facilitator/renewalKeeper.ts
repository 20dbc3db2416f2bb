/**
 * The renewal keeper (docs/subscriptions.md): charges due subscriptions with `collectMany`, so renewals need
 * no action from subscribers or providers.
 *
 * - "Due" is judged against the chain's time (the latest block's timestamp), never the wall clock: a
 *   devnet's time is moved by `advanceTime`, and a real chain's clock is the one the contract uses.
 * - Outcomes come from the chain: the contract renews (SubscriptionRenewed) or marks the subscription
 *   PastDue (RenewalFailed) without reverting, and the indexer turns those logs into
 *   `subscription.renewed` / `subscription.renewal_failed`. The keeper itself writes no events.
 * - A failed pull is retried for the same period after `retryAfterSeconds` of chain time, at most
 *   `maxAttempts` times; a PastDue subscription is not charged again on every run.
 * - Every `collectMany` goes through the transaction outbox (kind `renewal`, the due ids and periods in
 *   its meta): signed and recorded before it is broadcast, and its outcome (the attempts bookkeeping)
 *   recorded by the outbox handler exactly once, also when the keeper died after sending it. Ids in a
 *   renewal still on its way are left out of the next run. Collecting is idempotent on chain too (a
 *   renewed subscription is no longer due and `collectMany` skips it), so a keeper that dies mid-run is
 *   simply run again. A lease in the store lets one
 *   facilitator instance at a time run it, so instances sharing a database do not waste gas; its holder
 *   renews it while it runs, so the lease of an instance that died expires within `leaseMs` (15 s).
 * - One subscription cannot hold back the others. Anyone may create a plan in any token, so the keeper
 *   collects only subscriptions whose plan token is one this facilitator serves (`ctx.tokens`); and a
 *   batch that would revert as a whole (a hostile token on a manager deployed before per-item
 *   isolation, a call that needs absurd gas) is split in halves until the items that revert alone are
 *   found. Those are set aside with the back-off of a failed pull, so they do not sit at the head of
 *   every later run, and every other item of the batch is collected in the same run.
 * - A token paused by its issuer (tokenPauseWatch.ts) holds its plans' renewals: they are not sent
 *   (every pull would fail and mark the subscription PastDue), and the unpause wakes the keeper. A
 *   renewal that met a pause anyway (paused while it was on its way) counts no failure and no back-off:
 *   its subscription is due again at the next run after the unpause.
 */
import { randomBytes } from "node:crypto";
import type { Hash, Log } from "viem";
import { z } from "zod";
import { collectManyCall } from "../../../chain/actions/subscriptions/collectManyCall.ts";
import { estimateCollectMany } from "../../../chain/actions/subscriptions/estimateCollectMany.ts";
import { decodeSubscriptionEvents } from "../../../chain/events/decodeSubscriptionEvents.ts";
import { decodeRevert, isChainUnreachable } from "../../../facilitator/chainErrors.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import { outboxFor } from "../../../facilitator/outbox/outboxFor.ts";
import { openRowMeta } from "../../../facilitator/outbox/outboxRecords.ts";
import type { Outbox, OutboxHandler } from "../../../facilitator/outbox/outboxTypes.ts";
import { createWakeablePause } from "../../../facilitator/wakeablePause.ts";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../../store/columnSchemas.ts";
import { queryParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";
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
  /**
   * Time to live of the keeper's lease (default 15 000 ms). The instance running renews it every third
   * of that while its run lasts, so a run may take longer; a lease left by an instance that died (its
   * renewals stopped) is taken over once this much time passed since its last renewal.
   */
  leaseMs?: number | undefined;
  /** How long a run waits for another instance's run to end before giving up (default 120 000 ms). */
  waitForLeaseMs?: number | undefined;
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
  "store" | "publicClient" | "gas" | "chainId" | "subscriptionManager" | "logger" | "tokens" | "tokenPause"
>;

const DueRowSchema = z.object({
  subscription_id: BigintColumnSchema,
  current_period_end: SafeIntColumnSchema,
});
type DueRow = z.infer<typeof DueRowSchema>;

const LEASE_NAME = "renewal-keeper";
/** The outbox kind of `collectMany` transactions. */
export const RENEWAL_KIND = "renewal";

/** What a renewal's outbox row carries for its handler. */
const RenewalMetaSchema = z.object({
  chainTime: z.number(),
  due: z.array(z.object({ id: z.string(), periodEnd: z.number() })),
});

/**
 * Gas a batch may need per item before it is treated as poisoned and split. The contract gives each
 * token call 100 000 gas (PULL_GAS) and an honest renewal costs about 50 000 in all; an estimate far
 * above that means an item is burning gas (on a manager without the cap) and would push the batch
 * toward the block's limit.
 */
const MAX_GAS_PER_ITEM = 250_000n;
const BATCH_GAS_OVERHEAD = 100_000n;

export function createRenewalKeeper(
  ctx: KeeperContext & Partial<Pick<FacilitatorContext, "outbox" | "clock">>,
  deps: {
    indexer?: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
    outbox?: Outbox | undefined;
  } & RenewalKeeperOptions = {},
): RenewalKeeper {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the renewal keeper needs a SubscriptionManager address");
  }
  const manager = ctx.subscriptionManager;
  const intervalMs = deps.intervalMs ?? 30_000;
  const batchSize = deps.batchSize ?? 50;
  const retryAfter = deps.retryAfterSeconds ?? 86_400;
  const maxAttempts = deps.maxAttempts ?? 4;
  const leaseMs = deps.leaseMs ?? 15_000;
  const waitForLeaseMs = deps.waitForLeaseMs ?? 120_000;
  const knownTokens = ctx.tokens.map((token) => token.address.toLowerCase());
  const holder = `${ctx.gas.address.toLowerCase()}:${randomBytes(6).toString("hex")}`;
  const log = ctx.logger.child({ component: "renewal-keeper" });
  const outbox = deps.outbox ?? outboxFor(ctx);

  let running = false;
  let loopDone: Promise<void> | undefined;
  const sleeper = createWakeablePause();
  let current: Promise<KeeperRun> | undefined;
  let stopResume: (() => void) | undefined;

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

  /** Extends this holder's lease by `leaseMs` from now; false when it is no longer this holder's. */
  async function renewLease(): Promise<boolean> {
    const rows = await ctx.store.query(
      `UPDATE worker_leases SET lease_until = now() + $3 * interval '1 millisecond'
       WHERE name = $1 AND holder = $2 RETURNING holder`,
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

  /** Ids in renewals queued or on their way (this instance's or another's): not collected again yet. */
  async function onTheirWay(): Promise<bigint[]> {
    const metas = await openRowMeta(
      ctx.store,
      { chainId: ctx.chainId, sender: ctx.gas.address },
      RENEWAL_KIND,
    );
    return metas.flatMap((meta) => {
      const parsed = RenewalMetaSchema.safeParse(meta);
      return parsed.success ? parsed.data.due.map((d) => BigInt(d.id)) : [];
    });
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
        knownTokens.filter((token) => ctx.tokenPause?.isPaused(token) !== true),
      ],
    );
  }

  /** What a `collectMany` did; `paused` are the failed pulls the token refused for its pause. */
  function outcomesOf(logs: readonly Log[]): {
    renewed: Set<string>;
    failed: Set<string>;
    paused: Set<string>;
  } {
    const renewed = new Set<string>();
    const failed = new Set<string>();
    const paused = new Set<string>();
    for (const event of decodeSubscriptionEvents([...logs])) {
      if (event.address.toLowerCase() !== manager.toLowerCase()) continue;
      if (event.eventName === "SubscriptionRenewed") renewed.add(event.args.subscriptionId.toString());
      if (event.eventName === "RenewalFailed") {
        const id = event.args.subscriptionId.toString();
        if (decodeRevert(event.args.reason)?.code === "TokenPaused") paused.add(id);
        else failed.add(id);
      }
    }
    return { renewed, failed, paused };
  }

  /**
   * The outbox handler of kind `renewal`: records the attempts of a mined `collectMany` in the store
   * transaction that closes its row, whoever is alive to see the receipt. A reverted or dropped
   * renewal records nothing: its subscriptions are still due and the next run collects them.
   */
  const handler: OutboxHandler = async (outcome, commit) => {
    if (outcome.status !== "confirmed") return;
    const meta = RenewalMetaSchema.parse(outcome.meta);
    const due = meta.due.map((d) => ({ subscription_id: BigInt(d.id), current_period_end: d.periodEnd }));
    const { renewed, failed, paused } = outcomesOf(outcome.logs);
    await commit((tx) => recordAttempts(tx, meta.chainTime, due, renewed, failed));
    if (paused.size > 0) {
      log.warn({ held: paused.size }, "renewals met a paused token: retried after it is unpaused");
      for (const token of knownTokens) ctx.tokenPause?.suspect(token);
    }
  };
  outbox.handle(RENEWAL_KIND, handler);
  // A renewal a reorganisation undid is sent again by the outbox (the same bytes at the same nonce;
  // outbox/confirmedRowWatch.ts) and the handler above records its new receipt. Nothing the handler
  // recorded needs undoing first: renewed ids had their attempts cleared, which the re-sent renewal
  // does again or counts a failure anew, and while the row is open its ids are left out of runs
  // (`onTheirWay`). The index follows the chain by itself (subscriptionIndexer.ts, a reorganised
  // cursor).
  outbox.onReorg(RENEWAL_KIND, async () => {});

  /** Clears the attempts of renewed ids and counts a failure (with its back-off) for failed ones. */
  async function recordAttempts(
    db: Queryable,
    chainTime: number,
    due: readonly DueRow[],
    renewed: ReadonlySet<string>,
    failed: ReadonlySet<string>,
  ): Promise<void> {
    await inTransaction(db, async (tx) => {
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
  async function collectable(ids: readonly bigint[]): Promise<bigint | undefined> {
    try {
      const gas = await estimateCollectMany(ctx.publicClient, {
        manager,
        account: ctx.gas.address,
        subscriptionIds: ids,
      });
      return gas <= BigInt(ids.length) * MAX_GAS_PER_ITEM + BATCH_GAS_OVERHEAD ? gas : undefined;
    } catch (error) {
      if (isChainRefusal(error)) return undefined;
      throw error;
    }
  }

  /** Sends `collectMany(rows)` through the outbox and waits for it; `undefined` when it did not go through. */
  async function sendCollect(
    chainTime: number,
    rows: readonly DueRow[],
    gas: bigint,
  ): Promise<{ hash: Hash; logs: readonly Log[] } | undefined> {
    const ids = rows.map((row) => row.subscription_id);
    const id = await outbox.enqueue(ctx.store, {
      ...collectManyCall({ manager, subscriptionIds: ids, gas: (gas * 12n) / 10n }),
      kind: RENEWAL_KIND,
      owner: `${ctx.chainId}:${manager.toLowerCase()}`,
      meta: {
        chainTime,
        due: rows.map((row) => ({ id: row.subscription_id.toString(), periodEnd: row.current_period_end })),
      },
    });
    const outcome = await outbox.waitFor(id);
    if (outcome.status === "confirmed") return { hash: outcome.hash, logs: outcome.logs };
    log.warn(
      {
        attempted: ids.length,
        status: outcome.status,
        ...(outcome.hash === null ? {} : { tx: outcome.hash }),
      },
      "renewal batch did not go through; splitting it",
    );
    return undefined;
  }

  /**
   * Collects `rows` in one transaction, or, when that would revert as a whole, each half on its own,
   * down to single items: an item that reverts alone is set aside, the rest are collected. A batch of
   * n items with k poisoned ones costs O(k log n) estimates and no reverted transaction.
   */
  async function collectBatch(chainTime: number, rows: readonly DueRow[], result: KeeperRun): Promise<void> {
    const ids = rows.map((row) => row.subscription_id);
    const gas = await collectable(ids);
    // Reverted or dropped although the estimate passed (state moved, or a token that behaves differently
    // when estimated): split like a batch that would revert.
    const sent = gas === undefined ? undefined : await sendCollect(chainTime, rows, gas);
    if (sent === undefined) {
      if (rows.length === 1) {
        const id = ids[0]!.toString();
        await recordAttempts(ctx.store, chainTime, rows, new Set(), new Set([id]));
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
    // The outbox handler recorded the attempts; the run reports them.
    const outcome = outcomesOf(sent.logs);
    result.renewed.push(...outcome.renewed);
    result.failed.push(...outcome.failed);
    log.info(
      {
        transaction: sent.hash,
        attempted: ids.length,
        renewed: outcome.renewed.size,
        failed: outcome.failed.size,
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
    // Wait out a run another instance (or this one's loop) is making, rather than skipping. A lease
    // whose holder died expires `leaseMs` after its last renewal and is taken then.
    for (let waited = 0; !(await takeLease()); waited += 200) {
      if (waited > waitForLeaseMs) return result;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    // Renewed while the run lasts (a run waits for receipts, which may take longer than the lease).
    // Should a renewal find the lease taken (this process stalled past its expiry), the run stops
    // before its next batch; a batch another instance also sends is harmless: `collectMany` skips a
    // subscription that is no longer due, and ids with a renewal on its way are left out.
    let lost = false;
    const heartbeat = setInterval(
      () => {
        renewLease().then(
          (held) => {
            if (!held && !lost) {
              lost = true;
              log.warn("renewal lease taken by another instance; this run stops after its batch");
            }
          },
          () => undefined,
        );
      },
      Math.max(1, Math.floor(leaseMs / 3)),
    );
    heartbeat.unref();
    try {
      await deps.indexer?.syncOnce();
      const block = await ctx.publicClient.getBlock({ blockTag: "latest" });
      result.chainTime = Number(block.timestamp);
      const tried: bigint[] = await onTheirWay();
      while (!lost) {
        const due = await dueNow(result.chainTime, tried);
        if (due.length === 0) break;
        tried.push(...due.map((row) => row.subscription_id));
        await collectBatch(result.chainTime, due, result);
      }
      if (result.attempted.length > 0) await deps.indexer?.syncOnce();
      return result;
    } finally {
      clearInterval(heartbeat);
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

  /** Whether the index holds any subscription a run could renew (else a run would only read the chain). */
  async function anyRenewable(): Promise<boolean> {
    const rows = await ctx.store.query(
      `SELECT 1 FROM subscriptions WHERE chain_id = $1 AND manager = $2 AND status IN ('Active', 'PastDue') LIMIT 1`,
      [ctx.chainId, manager.toLowerCase()],
    );
    return rows.length > 0;
  }

  async function loop(): Promise<void> {
    while (running) {
      try {
        // The indexer follows the manager's logs by itself: with no subscription in the index there is
        // nothing due, and the run's chain reads are saved.
        if (await anyRenewable()) await runOnce();
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
      if (outbox !== ctx.outbox) await outbox.start();
      stopResume = ctx.tokenPause?.onResume(() => sleeper.wake());
      loopDone = loop();
    },
    async stop() {
      running = false;
      stopResume?.();
      sleeper.wake();
      await loopDone;
      if (outbox !== ctx.outbox) await outbox.stop();
    },
  };
}

/** Runs `fn` in a transaction: the store's own, or the caller's when `db` is already one. */
function inTransaction(db: Queryable, fn: (tx: Queryable) => Promise<void>): Promise<void> {
  const store = db as Partial<Pick<KeeperContext["store"], "transaction">>;
  return typeof store.transaction === "function" ? store.transaction(fn) : fn(db);
}
