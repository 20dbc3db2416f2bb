/**
 * Follows the SubscriptionManager's events into the store (tables `plans`, `subscriptions`) and the
 * event log (`plan.*`, `subscription.*`, `allowance.*`), which webhooks, analytics, gates (cache
 * invalidation through `GET /events`) and the renewal keeper read.
 *
 * Invariants:
 * - A chunk of logs is applied in one store transaction together with the cursor that says it was
 *   read, so a crash re-reads the chunk rather than skipping or half-applying it.
 * - Every applied log is recorded by (chain, transaction hash, log index); a log met again (a retried
 *   chunk, a second facilitator instance on the same database) changes nothing and emits nothing.
 * - The cursor row is locked and compared before a chunk is applied; an instance that lost the race
 *   re-reads the cursor instead of applying a chunk another instance already applied.
 * - Rows are only ever written from logs in chain order, so the index equals the chain state at the
 *   cursor's block (plus anything the keeper or relays read fresh from the chain themselves).
 * - The cursor keeps its block's hash, and each applied log its block's. When the chain no longer has
 *   the cursor's block (a reorganisation deeper than `confirmations`), the index follows it: the cursor
 *   goes back `REORG_DEPTH` blocks, the applied logs above it whose block is not the chain's any more
 *   are forgotten and their events marked undone (`events.undone_at`: analytics stops counting them),
 *   the subscriptions they touched are read again from the chain, and the logs of the new chain are
 *   applied from there; logs still on the chain are not applied twice. An event whose transaction is
 *   mined again with the same outcome (the facilitator sends an undone renewal or deduction again) is
 *   revived, not recorded a second time. A chain whose head is more than `REORG_DEPTH` blocks below
 *   the cursor (a devnet restarted under the same database) has the deployment's rows dropped and
 *   rebuilt from the chain as it is, rather than the new chain's logs being skipped.
 */
import type { Logger } from "pino";
import { type Address, BlockNotFoundError, getAddress, type Hex, type Log } from "viem";
import { z } from "zod";
import { subscriptionManagerAbi } from "../../../chain/contracts/artifacts/SubscriptionManager.ts";
import { decodeSubscriptionEvents } from "../../../chain/events/decodeSubscriptionEvents.ts";
import { DeductionFailure } from "../../../chain/events/subscriptionStatus.ts";
import { getNetworkConfig } from "../../../chain/networks.ts";
import { isChainUnreachable } from "../../../facilitator/chainErrors.ts";
import { acquireChainWatch } from "../../../facilitator/chainWatch.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import { createWakeablePause, IDLE_BACKSTOP_MS } from "../../../facilitator/wakeablePause.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { BigintColumnSchema } from "../../../store/columnSchemas.ts";
import { queryOneParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";
import { renewalFailureOf } from "./renewalFailure.ts";
import {
  type ChainPlan,
  type ChainSubscription,
  chainPlanToRow,
  findPlan,
  findSubscription,
  type IndexScope,
  type PlanRow,
  type SubscriptionRow,
  statusOf,
  upsertPlan,
  upsertSubscription,
} from "./subscriptionRecords.ts";

export type SubscriptionIndexerOptions = {
  /**
   * Where a fresh index (no cursor yet) starts: `"genesis"` replays every log from block 0 (the
   * default on devnets), `"snapshot"` reads every plan and subscription at the current head and
   * follows logs from there (the default elsewhere: no history scan), or a block number to replay from
   * (the manager's deployment block).
   */
  start?: "genesis" | "snapshot" | bigint | undefined;
  /**
   * How often the chain is read for new logs when nothing says there are any. With no confirmations
   * (the default) the manager's logs wake the indexer (chainWatch.ts) and this is a backstop (default
   * 30 s); with confirmations the head is followed at this interval (default 1000 ms).
   */
  pollIntervalMs?: number | undefined;
  /** Blocks per `eth_getLogs` call (default the facilitator's `logsRange`, else 2000; halved on a refusal). */
  chunkSize?: number | undefined;
  /** Blocks to stay behind the head, as protection against reorgs (default 0). */
  confirmations?: number | undefined;
};

export type SyncResult = { fromBlock: bigint; toBlock: bigint; logs: number };

export type SubscriptionIndexer = {
  /** Reads and applies every log up to the (confirmed) head; concurrent calls run one after another. */
  syncOnce(): Promise<SyncResult>;
  /** Asks the background loop to sync now. */
  poke(): void;
  /** The last block applied, or `undefined` before the first sync. */
  cursor(): Promise<bigint | undefined>;
  start(): Promise<void>;
  stop(): Promise<void>;
};

type IndexerContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "chainId" | "network" | "subscriptionManager" | "logger" | "recordEvent"
> &
  Partial<Pick<FacilitatorContext, "logsRange">>;

type ManagerEvent = ReturnType<typeof decodeSubscriptionEvents>[number];

/** How far back the index looks for logs a reorganisation removed (the outbox watches as deep). */
const REORG_DEPTH = 64n;

const CursorRowSchema = z.object({ block_number: BigintColumnSchema, block_hash: z.string().nullable() });
const READ_CONCURRENCY = 16;

export function createSubscriptionIndexer(
  ctx: IndexerContext,
  options: SubscriptionIndexerOptions = {},
): SubscriptionIndexer {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the subscription indexer needs a SubscriptionManager address");
  }
  const manager: Address = ctx.subscriptionManager;
  const scope: IndexScope = { chainId: ctx.chainId, manager };
  const cursorName = `subscriptions:${ctx.chainId}:${manager.toLowerCase()}`;
  const confirmations = BigInt(options.confirmations ?? 0);
  const pollIntervalMs = options.pollIntervalMs ?? (confirmations === 0n ? IDLE_BACKSTOP_MS : 1_000);
  const start = options.start ?? (getNetworkConfig(ctx.network)?.isDevnet === false ? "snapshot" : "genesis");
  let chunkSize = BigInt(options.chunkSize ?? ctx.logsRange ?? 2_000);
  const log: Logger = ctx.logger.child({ component: "subscription-indexer" });
  const client = ctx.publicClient;

  let queue: Promise<unknown> = Promise.resolve();
  let running = false;
  let loopDone: Promise<void> | undefined;
  const sleeper = createWakeablePause();
  let poked = false;
  let releaseWatch: (() => void) | undefined;

  function serialized<T>(fn: () => Promise<T>): Promise<T> {
    const next = queue.then(fn, fn);
    queue = next.catch(() => undefined);
    return next;
  }

  async function readCursorRow(db: Queryable = ctx.store, lock = false) {
    return queryOneParsed(
      db,
      CursorRowSchema,
      `SELECT block_number, block_hash FROM chain_cursors WHERE name = $1${lock ? " FOR UPDATE" : ""}`,
      [cursorName],
    );
  }

  async function readCursor(db: Queryable = ctx.store, lock = false): Promise<bigint | undefined> {
    return (await readCursorRow(db, lock))?.block_number;
  }

  /** True when the chain no longer has the block the cursor was written at (restarted or reorganised). */
  async function chainReplaced(): Promise<boolean> {
    const row = await readCursorRow();
    if (row === undefined || row.block_number < 0n || row.block_hash === null) return false;
    try {
      const block = await client.getBlock({ blockNumber: row.block_number });
      return block.hash?.toLowerCase() !== row.block_hash;
    } catch (error) {
      if (error instanceof BlockNotFoundError) return true;
      throw error;
    }
  }

  /** Forgets this deployment's index so it is rebuilt from the chain as it is now. */
  async function resetIndex(): Promise<void> {
    log.warn(
      { cursor: cursorName },
      "the chain no longer has the indexed blocks; rebuilding the subscription index",
    );
    await ctx.store.transaction(async (tx) => {
      const scopeParams = [ctx.chainId, manager.toLowerCase()];
      await tx.query("DELETE FROM subscriptions WHERE chain_id = $1 AND manager = $2", scopeParams);
      await tx.query("DELETE FROM plans WHERE chain_id = $1 AND manager = $2", scopeParams);
      await tx.query("DELETE FROM renewal_attempts WHERE chain_id = $1 AND manager = $2", scopeParams);
      await tx.query("DELETE FROM indexed_logs WHERE chain_id = $1", [ctx.chainId]);
      await tx.query("DELETE FROM chain_cursors WHERE name = $1", [cursorName]);
    });
  }

  async function blockHash(blockNumber: bigint): Promise<string | null> {
    if (blockNumber < 0n) return null;
    const block = await client.getBlock({ blockNumber });
    return block.hash?.toLowerCase() ?? null;
  }

  /** Creates the cursor for a fresh index, from `start`. */
  async function initialise(head: bigint): Promise<void> {
    let cursor: bigint;
    if (start === "genesis") cursor = -1n;
    else if (typeof start === "bigint") cursor = start - 1n;
    else {
      await snapshot(head);
      cursor = head;
    }
    await ctx.store.query(
      `INSERT INTO chain_cursors (name, block_number, block_hash) VALUES ($1, $2, $3)
       ON CONFLICT (name) DO NOTHING`,
      [cursorName, cursor, await blockHash(cursor)],
    );
  }

  /** Reads every plan and subscription as of `block` into the tables (no events: nothing happened). */
  async function snapshot(block: bigint): Promise<void> {
    const read = <T>(
      functionName: "planCount" | "subscriptionCount" | "plans" | "subscriptions",
      id?: bigint,
    ) =>
      client.readContract({
        address: manager,
        abi: subscriptionManagerAbi,
        functionName,
        args: id === undefined ? undefined : [id],
        blockNumber: block,
      } as never) as Promise<T>;
    const planCount = await read<bigint>("planCount");
    const subscriptionCount = await read<bigint>("subscriptionCount");
    const plans = new Map<bigint, PlanRow>();
    for (let first = 1n; first <= planCount; first += BigInt(READ_CONCURRENCY)) {
      const ids: bigint[] = [];
      for (let id = first; id <= planCount && id < first + BigInt(READ_CONCURRENCY); id++) ids.push(id);
      const rows = await Promise.all(ids.map((id) => read<ChainPlan>("plans", id)));
      for (const [i, plan] of rows.entries()) plans.set(ids[i]!, chainPlanToRow(ids[i]!, plan));
    }
    const subs: [bigint, ChainSubscription][] = [];
    for (let first = 1n; first <= subscriptionCount; first += BigInt(READ_CONCURRENCY)) {
      const ids: bigint[] = [];
      for (let id = first; id <= subscriptionCount && id < first + BigInt(READ_CONCURRENCY); id++)
        ids.push(id);
      const rows = await Promise.all(ids.map((id) => read<ChainSubscription>("subscriptions", id)));
      for (const [i, sub] of rows.entries()) subs.push([ids[i]!, sub]);
    }
    await ctx.store.transaction(async (tx) => {
      for (const plan of plans.values()) await upsertPlan(tx, scope, plan, null);
      for (const [subscriptionId, sub] of subs) {
        const plan = plans.get(sub.planId);
        if (plan === undefined) continue;
        await upsertSubscription(tx, scope, {
          subscriptionId,
          sub,
          provider: plan.provider,
          block,
          createdTx: null,
        });
      }
    });
    log.info(
      { block, plans: plans.size, subscriptions: subs.length },
      "subscription index started from a snapshot",
    );
  }

  async function fetchLogs(fromBlock: bigint, toBlock: bigint): Promise<{ logs: Log[]; toBlock: bigint }> {
    for (;;) {
      const end = fromBlock + chunkSize - 1n < toBlock ? fromBlock + chunkSize - 1n : toBlock;
      try {
        const logs = await client.getLogs({ address: manager, fromBlock, toBlock: end });
        return { logs, toBlock: end };
      } catch (error) {
        // Providers refuse wide ranges or large results in various words; a narrower range is the cure.
        if (isChainUnreachable(error) || chunkSize === 1n) throw error;
        chunkSize = chunkSize / 2n > 0n ? chunkSize / 2n : 1n;
        log.debug({ chunkSize }, "getLogs refused; narrowing the range");
      }
    }
  }

  async function syncOnceUnserialized(): Promise<SyncResult> {
    const latest = await client.getBlockNumber({ cacheTime: 0 });
    const head = latest - confirmations;
    if (await chainReplaced()) {
      const cursorRow = await readCursorRow();
      if (cursorRow !== undefined && cursorRow.block_number - latest > REORG_DEPTH) await resetIndex();
      else if (cursorRow !== undefined) await followReorganisation(cursorRow.block_number);
    }
    let cursor = await readCursor();
    if (cursor === undefined) {
      await initialise(head < 0n ? 0n : head);
      cursor = (await readCursor()) ?? -1n;
    }
    const fromBlock = cursor + 1n;
    let applied = 0;
    while (cursor < head) {
      const expected: bigint = cursor;
      const chunk = await fetchLogs(expected + 1n, head);
      const hash = await blockHash(chunk.toBlock);
      const events = decodeSubscriptionEvents(chunk.logs).sort((a, b) =>
        a.blockNumber === b.blockNumber ? a.logIndex - b.logIndex : a.blockNumber < b.blockNumber ? -1 : 1,
      );
      if (events.length === 0) {
        // Nothing to apply: move the cursor with a compare-and-set instead of a transaction.
        const moved = await ctx.store.query(
          `UPDATE chain_cursors SET block_number = $2, block_hash = $4, updated_at = now()
           WHERE name = $1 AND block_number = $3 RETURNING name`,
          [cursorName, chunk.toBlock, expected, hash],
        );
        cursor = moved.length === 1 ? chunk.toBlock : ((await readCursor()) ?? expected);
        continue;
      }
      const outcome = await ctx.store.transaction(async (tx) => {
        const current = await readCursor(tx, true);
        if (current !== expected) return { raced: current };
        let count = 0;
        for (const event of events) if (await applyOnce(tx, event)) count++;
        await tx.query(
          "UPDATE chain_cursors SET block_number = $2, block_hash = $3, updated_at = now() WHERE name = $1",
          [cursorName, chunk.toBlock, hash],
        );
        return { applied: count };
      });
      if ("raced" in outcome) {
        cursor = outcome.raced ?? expected;
        continue;
      }
      applied += outcome.applied;
      cursor = chunk.toBlock;
    }
    return { fromBlock, toBlock: cursor, logs: applied };
  }

  async function applyOnce(tx: Queryable, event: ManagerEvent): Promise<boolean> {
    if (event.address.toLowerCase() !== manager.toLowerCase()) return false;
    const inserted = await tx.query(
      `INSERT INTO indexed_logs (chain_id, tx_hash, log_index, block_number, block_hash)
       VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING log_index`,
      [
        ctx.chainId,
        event.transactionHash.toLowerCase(),
        event.logIndex,
        event.blockNumber,
        event.blockHash?.toLowerCase() ?? null,
      ],
    );
    if (inserted.length === 0) return false;
    await apply(tx, event);
    return true;
  }

  // ---- following a reorganisation ---------------------------------------------------------------

  /**
   * The chain replaced the cursor's block: forgets the applied logs above `cursor - REORG_DEPTH` that
   * are not on the chain any more, marks their events undone, reads the subscriptions they touched again
   * from the chain, and moves the cursor back, so the sync that follows applies the new chain's logs.
   * Chain reads first; the writes are one transaction, a compare-and-set on the cursor.
   */
  async function followReorganisation(cursor: bigint): Promise<void> {
    const back = cursor - REORG_DEPTH < -1n ? -1n : cursor - REORG_DEPTH;
    const applied = await ctx.store.query<{
      tx_hash: Hex;
      log_index: number;
      block_number: string;
      block_hash: string | null;
    }>(
      `SELECT tx_hash, log_index, block_number, block_hash FROM indexed_logs
       WHERE chain_id = $1 AND block_number > $2`,
      [ctx.chainId, back],
    );
    const canonical = new Map<string, string | null>();
    const receipts = new Map<string, bigint | null>();
    const orphans: { tx_hash: Hex; log_index: number }[] = [];
    for (const row of applied) {
      const number = BigInt(row.block_number);
      if (row.block_hash !== null) {
        if (!canonical.has(row.block_number)) {
          canonical.set(row.block_number, number > cursor + 1n ? null : await blockHashOrNull(number));
        }
        if (canonical.get(row.block_number) !== row.block_hash) orphans.push(row);
        continue;
      }
      // Applied before block hashes were kept: its transaction's receipt says where it is now.
      if (!receipts.has(row.tx_hash)) receipts.set(row.tx_hash, await minedIn(row.tx_hash));
      if (receipts.get(row.tx_hash) !== number) orphans.push(row);
    }
    const touched = new Set<string>();
    const touchedPlans = new Set<string>();
    for (const orphan of orphans) {
      const events = await ctx.store.query<{ subscription_id: string | null; plan_id: string | null }>(
        `SELECT data ->> 'subscriptionId' AS subscription_id, data ->> 'planId' AS plan_id FROM events
         WHERE data ? 'logIndex' AND data ->> 'transaction' = $1 AND data ->> 'logIndex' = $2
           AND undone_at IS NULL`,
        [orphan.tx_hash, String(orphan.log_index)],
      );
      for (const event of events) {
        if (event.subscription_id !== null) touched.add(event.subscription_id);
        else if (event.plan_id !== null) touchedPlans.add(event.plan_id);
      }
    }
    const freshPlans = new Map<bigint, ChainPlan>();
    for (const id of touchedPlans) {
      freshPlans.set(
        BigInt(id),
        (await client.readContract({
          address: manager,
          abi: subscriptionManagerAbi,
          functionName: "plans",
          args: [BigInt(id)],
        })) as ChainPlan,
      );
    }
    const fresh = new Map<bigint, ChainSubscription>();
    for (const id of touched) {
      fresh.set(
        BigInt(id),
        (await client.readContract({
          address: manager,
          abi: subscriptionManagerAbi,
          functionName: "subscriptions",
          args: [BigInt(id)],
        })) as ChainSubscription,
      );
    }
    const backHash = await blockHash(back);
    const head = await client.getBlockNumber({ cacheTime: 0 });
    const moved = await ctx.store.transaction(async (tx) => {
      if ((await readCursor(tx, true)) !== cursor) return false;
      for (const orphan of orphans) {
        await tx.query("DELETE FROM indexed_logs WHERE chain_id = $1 AND tx_hash = $2 AND log_index = $3", [
          ctx.chainId,
          orphan.tx_hash,
          orphan.log_index,
        ]);
        const undone = await tx.query<{ id: string | number; type: string; data: Record<string, unknown> }>(
          `UPDATE events SET undone_at = now()
           WHERE data ? 'logIndex' AND data ->> 'transaction' = $1 AND data ->> 'logIndex' = $2
           AND undone_at IS NULL RETURNING id, type, data`,
          [orphan.tx_hash, String(orphan.log_index)],
        );
        for (const event of undone) await recordUndoing(tx, "event.undone", event);
      }
      for (const [planId, plan] of freshPlans) {
        // A plan created in an undone block: the chain's plan of that id now, if any.
        const row = chainPlanToRow(planId, plan);
        if (BigInt(row.provider) === 0n) {
          await tx.query("DELETE FROM plans WHERE chain_id = $1 AND manager = $2 AND plan_id = $3", [
            ctx.chainId,
            manager.toLowerCase(),
            planId,
          ]);
          continue;
        }
        await tx.query(
          `UPDATE plans SET provider = $4, token = $5, amount = $6, interval_seconds = $7, included_units = $8,
             overage_unit_price = $9, deprecated = $10, successor_plan_id = $11, updated_at = now()
           WHERE chain_id = $1 AND manager = $2 AND plan_id = $3`,
          [
            ctx.chainId,
            manager.toLowerCase(),
            planId,
            row.provider,
            row.token,
            row.amount,
            row.interval_seconds,
            row.included_units,
            row.overage_unit_price,
            row.deprecated,
            row.successor_plan_id,
          ],
        );
      }
      for (const [subscriptionId, sub] of fresh) {
        if (statusOf(sub.status) === undefined) {
          await tx.query(
            "DELETE FROM subscriptions WHERE chain_id = $1 AND manager = $2 AND subscription_id = $3",
            [ctx.chainId, manager.toLowerCase(), subscriptionId],
          );
          continue;
        }
        const plan = await findPlan(tx, scope, sub.planId);
        if (plan === undefined) continue;
        await upsertSubscription(tx, scope, {
          subscriptionId,
          sub,
          provider: plan.provider,
          block: head,
          createdTx: null,
        });
      }
      await tx.query(
        "UPDATE chain_cursors SET block_number = $2, block_hash = $3, updated_at = now() WHERE name = $1",
        [cursorName, back, backHash],
      );
      return true;
    });
    if (moved) {
      log.warn(
        { cursor: cursorName, from: cursor, to: back, undone: orphans.length, subscriptions: touched.size },
        "a reorganisation replaced indexed blocks; the index follows the new chain",
      );
    }
  }

  async function blockHashOrNull(blockNumber: bigint): Promise<string | null> {
    try {
      return await blockHash(blockNumber);
    } catch (error) {
      if (error instanceof BlockNotFoundError) return null;
      throw error;
    }
  }

  /** The block number the transaction is mined in now, or `null`. */
  async function minedIn(hash: Hex): Promise<bigint | null> {
    try {
      return (await client.getTransactionReceipt({ hash })).blockNumber;
    } catch (error) {
      if (error instanceof Error && error.name === "TransactionReceiptNotFoundError") return null;
      throw error;
    }
  }

  /**
   * Records the event of a log; or, when a reorganisation undid the same event of the same transaction
   * (its renewal or deduction sent again and mined with the same outcome), revives that one instead, so
   * webhooks and analytics see it once.
   */
  async function recordLogEvent(tx: Queryable, type: string, data: Record<string, unknown>): Promise<void> {
    const revived = await tx.query<{ id: string | number; type: string; data: Record<string, unknown> }>(
      `UPDATE events SET undone_at = NULL WHERE id = (
         SELECT id FROM events WHERE type = $1 AND undone_at IS NOT NULL AND data ->> 'transaction' = $2
           AND coalesce(data ->> 'subscriptionId', '') = $3 AND coalesce(data ->> 'planId', '') = $4
           AND coalesce(data ->> 'ref', '') = $5
         ORDER BY id LIMIT 1) RETURNING id, type, data`,
      [
        type,
        String(data.transaction ?? ""),
        String(data.subscriptionId ?? ""),
        String(data.planId ?? ""),
        String(data.ref ?? ""),
      ],
    );
    if (revived.length === 0) await ctx.recordEvent(tx, type, data);
    for (const event of revived) await recordUndoing(tx, "event.restored", event);
  }

  /**
   * Tells the event's provider that a reorganisation undid it (`event.undone`), or that the same
   * transaction, mined again with the same outcome, restored it (`event.restored`): in the same store
   * transaction as the change, so a poller of `/events` or a webhook receiver that counted the event
   * can take it back, and count it again.
   */
  async function recordUndoing(
    tx: Queryable,
    type: "event.undone" | "event.restored",
    event: { id: string | number; type: string; data: Record<string, unknown> },
  ): Promise<void> {
    const { data } = event;
    await ctx.recordEvent(tx, type, {
      eventId: Number(event.id),
      eventType: event.type,
      transaction: data.transaction,
      ...(data.provider === undefined ? {} : { provider: data.provider }),
      ...(data.payTo === undefined ? {} : { payTo: data.payTo }),
      ...(data.subscriptionId === undefined ? {} : { subscriptionId: data.subscriptionId }),
      ...(data.planId === undefined ? {} : { planId: data.planId }),
    });
  }

  // ---- applying one event ----------------------------------------------------------------------

  async function ensurePlan(tx: Queryable, planId: bigint): Promise<PlanRow> {
    const row = await findPlan(tx, scope, planId);
    if (row !== undefined) return row;
    // Only when the index started after the plan was created (a snapshot races a log, or `start` was a
    // later block): provider, token and prices never change, so the current state is good enough.
    const plan = (await client.readContract({
      address: manager,
      abi: subscriptionManagerAbi,
      functionName: "plans",
      args: [planId],
    })) as ChainPlan;
    const fresh = chainPlanToRow(planId, plan);
    await upsertPlan(tx, scope, fresh, null);
    return fresh;
  }

  async function ensureSubscription(
    tx: Queryable,
    subscriptionId: bigint,
    block: bigint,
  ): Promise<SubscriptionRow> {
    const row = await findSubscription(tx, scope, subscriptionId);
    if (row !== undefined) return row;
    const sub = (await client.readContract({
      address: manager,
      abi: subscriptionManagerAbi,
      functionName: "subscriptions",
      args: [subscriptionId],
    })) as ChainSubscription;
    const plan = await ensurePlan(tx, sub.planId);
    await upsertSubscription(tx, scope, {
      subscriptionId,
      sub,
      provider: plan.provider,
      block,
      createdTx: null,
    });
    const created = await findSubscription(tx, scope, subscriptionId);
    if (created === undefined) {
      throw new TollgateError("Internal", `subscription ${subscriptionId} is in a log but not on chain`);
    }
    return created;
  }

  async function updateSubscription(
    tx: Queryable,
    subscriptionId: bigint,
    block: bigint,
    set: string,
    params: readonly (bigint | string | number | boolean)[],
  ): Promise<void> {
    await tx.query(
      `UPDATE subscriptions SET ${set}, last_block = $4, updated_at = now()
       WHERE chain_id = $1 AND manager = $2 AND subscription_id = $3`,
      [ctx.chainId, manager.toLowerCase(), subscriptionId, block, ...params],
    );
  }

  async function apply(tx: Queryable, event: ManagerEvent): Promise<void> {
    const where = {
      network: ctx.network,
      manager: getAddress(manager),
      transaction: event.transactionHash.toLowerCase() as Hex,
      blockNumber: event.blockNumber.toString(),
      logIndex: event.logIndex,
    };
    const block = event.blockNumber;
    const subscriptionData = async (subscriptionId: bigint, status: string | undefined) => {
      const sub = await ensureSubscription(tx, subscriptionId, block);
      const plan = await ensurePlan(tx, sub.plan_id);
      const provider = getAddress(plan.provider);
      return {
        subscriptionId: subscriptionId.toString(),
        planId: sub.plan_id.toString(),
        subscriber: getAddress(sub.subscriber),
        provider,
        payTo: provider,
        token: getAddress(plan.token),
        ...(status === undefined ? {} : { status }),
      };
    };

    switch (event.eventName) {
      case "PlanCreated": {
        const a = event.args;
        await upsertPlan(
          tx,
          scope,
          chainPlanToRow(a.planId, {
            provider: a.provider,
            token: a.token,
            amount: a.amount,
            interval: a.interval,
            includedUnits: a.includedUnits,
            overageUnitPrice: a.overageUnitPrice,
            deprecated: false,
            successorPlanId: 0n,
          }),
          where.transaction,
        );
        await recordLogEvent(tx, "plan.created", {
          planId: a.planId.toString(),
          provider: getAddress(a.provider),
          payTo: getAddress(a.provider),
          token: getAddress(a.token),
          amount: a.amount.toString(),
          interval: Number(a.interval),
          includedUnits: a.includedUnits.toString(),
          overageUnitPrice: a.overageUnitPrice.toString(),
          ...where,
        });
        return;
      }
      case "PlanDeprecated": {
        const a = event.args;
        const plan = await ensurePlan(tx, a.planId);
        await tx.query(
          `UPDATE plans SET deprecated = true, successor_plan_id = $4, updated_at = now()
           WHERE chain_id = $1 AND manager = $2 AND plan_id = $3`,
          [ctx.chainId, manager.toLowerCase(), a.planId, a.successorPlanId],
        );
        await recordLogEvent(tx, "plan.deprecated", {
          planId: a.planId.toString(),
          successorPlanId: a.successorPlanId === 0n ? null : a.successorPlanId.toString(),
          provider: getAddress(plan.provider),
          payTo: getAddress(plan.provider),
          ...where,
        });
        return;
      }
      case "OperatorSet":
        // Read from the chain when it matters (usage); nothing for the event log.
        return;
      case "SubscriptionCreated": {
        const a = event.args;
        const plan = await ensurePlan(tx, a.planId);
        await upsertSubscription(tx, scope, {
          subscriptionId: a.subscriptionId,
          sub: {
            subscriber: a.subscriber,
            planId: a.planId,
            status: 1,
            createdAt: a.periodStart,
            periodStart: a.periodStart,
            currentPeriodEnd: a.periodEnd,
            pausedRemaining: 0n,
            maxOverage: a.maxOverage,
            overageUsed: 0n,
          },
          provider: plan.provider,
          block,
          createdTx: where.transaction,
        });
        await recordLogEvent(tx, "subscription.created", {
          ...(await subscriptionData(a.subscriptionId, "Active")),
          amount: a.amount.toString(),
          periodStart: Number(a.periodStart),
          periodEnd: Number(a.periodEnd),
          maxOverage: a.maxOverage.toString(),
          ...where,
        });
        return;
      }
      case "SubscriptionRenewed": {
        const a = event.args;
        await ensureSubscription(tx, a.subscriptionId, block);
        await updateSubscription(
          tx,
          a.subscriptionId,
          block,
          "status = 'Active', period_start = $5, current_period_end = $6, overage_used = 0, renewal_failure_code = NULL, renewal_failure_message = NULL",
          [a.periodStart, a.periodEnd],
        );
        await recordLogEvent(tx, "subscription.renewed", {
          ...(await subscriptionData(a.subscriptionId, "Active")),
          amount: a.amount.toString(),
          periodStart: Number(a.periodStart),
          periodEnd: Number(a.periodEnd),
          ...where,
        });
        return;
      }
      case "RenewalFailed": {
        const a = event.args;
        await ensureSubscription(tx, a.subscriptionId, block);
        // The reason decoded (AccountBlacklisted, InsufficientFunds, …), kept until the next renewal.
        const failure = renewalFailureOf(a.reason);
        await updateSubscription(
          tx,
          a.subscriptionId,
          block,
          "status = 'PastDue', renewal_failure_code = $5, renewal_failure_message = $6",
          [failure.code, failure.message],
        );
        await recordLogEvent(tx, "subscription.renewal_failed", {
          ...(await subscriptionData(a.subscriptionId, "PastDue")),
          amount: a.amount.toString(),
          code: failure.code,
          message: failure.message,
          reason: a.reason,
          ...where,
        });
        return;
      }
      case "SubscriptionPaused": {
        const a = event.args;
        await ensureSubscription(tx, a.subscriptionId, block);
        await updateSubscription(tx, a.subscriptionId, block, "status = 'Paused', paused_remaining = $5", [
          a.remaining,
        ]);
        await recordLogEvent(tx, "subscription.paused", {
          ...(await subscriptionData(a.subscriptionId, "Paused")),
          remaining: Number(a.remaining),
          ...where,
        });
        return;
      }
      case "SubscriptionResumed": {
        const a = event.args;
        await ensureSubscription(tx, a.subscriptionId, block);
        // Without a charge the period goes on unchanged (it kept running while paused: periodEnd is the
        // end it had, and period_start keeps the period's length ending there); with one, the
        // SubscriptionRenewed just before has already set the new period.
        await updateSubscription(
          tx,
          a.subscriptionId,
          block,
          `status = 'Active', paused_remaining = 0,
           period_start = CASE WHEN $6 THEN period_start ELSE $5 - (current_period_end - period_start) END,
           current_period_end = $5`,
          [a.periodEnd, a.charged],
        );
        await recordLogEvent(tx, "subscription.resumed", {
          ...(await subscriptionData(a.subscriptionId, "Active")),
          periodEnd: Number(a.periodEnd),
          charged: a.charged,
          ...where,
        });
        return;
      }
      case "SubscriptionCancelled": {
        const a = event.args;
        await ensureSubscription(tx, a.subscriptionId, block);
        await updateSubscription(
          tx,
          a.subscriptionId,
          block,
          "status = 'Cancelled', paused_remaining = 0",
          [],
        );
        await recordLogEvent(tx, "subscription.cancelled", {
          ...(await subscriptionData(a.subscriptionId, "Cancelled")),
          by: getAddress(a.by),
          ...where,
        });
        return;
      }
      case "MaxOverageSet": {
        const a = event.args;
        await ensureSubscription(tx, a.subscriptionId, block);
        await updateSubscription(tx, a.subscriptionId, block, "max_overage = $5", [a.maxOverage]);
        return;
      }
      case "AllowanceDeducted": {
        const a = event.args;
        await ensureSubscription(tx, a.subscriptionId, block);
        await updateSubscription(tx, a.subscriptionId, block, "overage_used = $5, max_overage = $6", [
          a.overageUsed,
          a.maxOverage,
        ]);
        await recordLogEvent(tx, "allowance.deducted", {
          ...(await subscriptionData(a.subscriptionId, undefined)),
          ref: a.ref,
          ...(await usageRefOf(tx, a.ref)),
          amount: a.amount.toString(),
          overageUsed: a.overageUsed.toString(),
          maxOverage: a.maxOverage.toString(),
          ...where,
        });
        return;
      }
      case "DeductionFailed": {
        const a = event.args;
        // Only a cap reached is an event of the log; a deduction refused for a paused or cancelled
        // subscription, or a failed pull, shows on the usage record that asked for it.
        if (a.reason !== DeductionFailure.AllowanceExhausted) return;
        const sub = await ensureSubscription(tx, a.subscriptionId, block);
        await recordLogEvent(tx, "allowance.exhausted", {
          ...(await subscriptionData(a.subscriptionId, undefined)),
          ref: a.ref,
          ...(await usageRefOf(tx, a.ref)),
          amount: a.amount.toString(),
          overageUsed: sub.overage_used.toString(),
          maxOverage: sub.max_overage.toString(),
          ...where,
        });
        return;
      }
    }
  }

  /** The provider's own reference of a deduction the usage worker sent (docs/subscriptions.md). */
  async function usageRefOf(tx: Queryable, chainRef: Hex): Promise<{ usageRef?: string }> {
    const rows = await tx.query<{ ref: string }>(
      "SELECT ref FROM usage_records WHERE chain_ref = $1 LIMIT 1",
      [chainRef.toLowerCase()],
    );
    const ref = rows[0]?.ref;
    return ref === undefined ? {} : { usageRef: ref };
  }

  async function loop(): Promise<void> {
    let failing = false;
    while (running) {
      poked = false;
      try {
        await serialized(syncOnceUnserialized);
        if (failing) log.info("subscription indexer caught up again");
        failing = false;
      } catch (error) {
        if (!failing) {
          if (isChainUnreachable(error)) log.warn("chain unreachable; the subscription index is behind");
          else log.error({ err: error }, "subscription index sync failed; retrying");
        }
        failing = true;
      }
      if (!running) break;
      if (poked) continue;
      await sleeper.pause(pollIntervalMs);
    }
  }

  return {
    syncOnce: () => serialized(syncOnceUnserialized),
    poke() {
      poked = true;
      sleeper.wake();
    },
    cursor: () => readCursor(),
    async start() {
      if (running) return;
      running = true;
      const shared = acquireChainWatch(client, log);
      const stopWatching = shared.watch.watch(manager, () => {
        poked = true;
        sleeper.wake();
      });
      releaseWatch = () => {
        stopWatching();
        shared.release();
      };
      loopDone = loop();
    },
    async stop() {
      running = false;
      sleeper.wake();
      await loopDone;
      await queue;
      releaseWatch?.();
      releaseWatch = undefined;
    },
  };
}
