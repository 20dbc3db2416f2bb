/**
 * Settles recorded usage on chain in batches with `SubscriptionManager.deductAllowanceMany`, one
 * transaction for many records, each with its own outcome (DESIGN.md §4, §5).
 *
 * Invariants (the settlement engine's, applied to deductions):
 * 1. A record is stored `pending` by `POST /usage` before anything is sent.
 * 2. Records are claimed into a batch (`submitted`) with `FOR UPDATE SKIP LOCKED`; the batch's
 *    transaction is signed and recorded (raw bytes, hash, account nonce, chain head) before it is
 *    broadcast. After a crash the recorded transaction is looked up or broadcast again, never re-signed
 *    with other contents.
 * 3. Outcomes come only from a receipt's per-item events (AllowanceDeducted / DeductionFailed, matched
 *    by each record's unique bytes32 ref) or, when the recorded transaction lost its nonce to another,
 *    from the chain's AllowanceDeducted logs for each ref. A record whose deduction is not on chain
 *    goes back to the queue, so no path deducts twice or loses a deduction.
 *
 * 4. One record cannot hold back the others. A record on a plan whose token the facilitator does not
 *    serve fails alone before anything is sent (anyone may create a plan in any token), and a batch
 *    that would revert as a whole is split in halves until the records that revert on their own are
 *    found: those fail with the decoded reason, the rest are sent. If every record reverts alone the
 *    cause is likely shared (an operator revoked a moment ago), so they go back to the queue instead,
 *    a bounded number of times.
 *
 * The `allowance.deducted` / `allowance.exhausted` events are written by the subscription indexer from
 * the same logs (so deductions made by providers themselves appear too); this worker asks the indexer
 * to catch up after each batch.
 */
import type { Logger } from "pino";
import {
  type Address,
  encodeFunctionData,
  getAbiItem,
  type Hash,
  type Hex,
  keccak256,
  parseEventLogs,
  type TransactionReceipt,
} from "viem";
import { subscriptionManagerAbi } from "../../chain/contracts/artifacts/SubscriptionManager.ts";
import { DeductionFailure } from "../../chain/events/subscriptionStatus.ts";
import { type ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import { isChainUnreachable } from "../chainErrors.ts";
import type { FacilitatorContext } from "../facilitatorModule.ts";
import { isChainRefusal } from "../subscriptions/chainRefusal.ts";
import { toManagerError } from "../subscriptions/managerErrors.ts";
import type { SubscriptionIndexer } from "../subscriptions/subscriptionIndexer.ts";
import { createWakeablePause } from "../wakeablePause.ts";
import { type UsageBatchRow, UsageBatchRowSchema, type UsageRow, UsageRowSchema } from "./usageRecords.ts";

export type UsageSettlerOptions = {
  /** Records per transaction (default 100). */
  maxBatchSize?: number | undefined;
  /** How long the oldest pending record may wait for others to fill its batch (default 500 ms). */
  lingerMs?: number | undefined;
  /** How often the loop looks for work and open batches (default 1000 ms). */
  pollIntervalMs?: number | undefined;
  confirmations?: number | undefined;
  /** Test seams for crash tests, called at the named points of a batch's life. */
  faults?:
    | {
        afterRecord?: ((batchId: number) => void | Promise<void>) | undefined;
        afterBroadcast?: ((batchId: number) => void | Promise<void>) | undefined;
      }
    | undefined;
};

export type UsageRunResult = { batches: number; settled: number; failed: number };

export type UsageSettler = {
  /** Wakes the loop (new records arrived). */
  signal(): void;
  /** Settles every pending record now, without lingering; resolves when all batches are recorded. */
  runOnce(): Promise<UsageRunResult>;
  /** Drives open batches left by a crash to their outcome. */
  reconcile(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
};

type SettlerContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "gas" | "chainId" | "subscriptionManager" | "logger" | "tokens"
>;

/** Attempts for a record whose whole batch transaction reverted before it fails. */
const MAX_ATTEMPTS = 3;

const failureByReason: Record<number, { code: ErrorCode; message: string }> = {
  [DeductionFailure.NotActive]: {
    code: "SubscriptionNotActive",
    message: "the subscription was not active when the deduction was settled",
  },
  [DeductionFailure.AllowanceExhausted]: {
    code: "AllowanceExhausted",
    message: "the deduction would pass the subscription's overage cap for this cycle",
  },
  [DeductionFailure.TransferFailed]: {
    code: "InsufficientFunds",
    message: "the subscriber's balance or allowance did not cover the deduction",
  },
};

export function createUsageSettler(
  ctx: SettlerContext,
  options: UsageSettlerOptions & { indexer?: Pick<SubscriptionIndexer, "syncOnce"> | undefined } = {},
): UsageSettler {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the usage settler needs a SubscriptionManager address");
  }
  const manager: Address = ctx.subscriptionManager;
  const managerText = manager.toLowerCase();
  const { store, publicClient: client, gas } = ctx;
  const maxBatchSize = options.maxBatchSize ?? 100;
  const lingerMs = options.lingerMs ?? 500;
  const pollIntervalMs = options.pollIntervalMs ?? 1_000;
  const confirmations = options.confirmations ?? 1;
  const sender = gas.address.toLowerCase();
  const knownTokens = new Set(ctx.tokens.map((token) => token.address.toLowerCase()));
  const log: Logger = ctx.logger.child({ component: "usage-settler" });

  let queue: Promise<unknown> = Promise.resolve();
  let running = false;
  let loopDone: Promise<void> | undefined;
  const sleeper = createWakeablePause();
  let dirty = false;

  function serialized<T>(fn: () => Promise<T>): Promise<T> {
    const next = queue.then(fn, fn);
    queue = next.catch(() => undefined);
    return next;
  }

  // ---- claiming ----------------------------------------------------------------------------------

  async function claim(
    force: boolean,
  ): Promise<{ batch: UsageBatchRow; rows: UsageRow[] } | "held" | undefined> {
    return store.transaction(async (tx) => {
      const head = await tx.query<{ waiting: string; age_ms: string | null }>(
        `SELECT count(*) AS waiting, floor(extract(epoch FROM now() - min(created_at)) * 1000)::bigint AS age_ms
         FROM usage_records WHERE status = 'pending' AND chain_id = $1 AND manager = $2`,
        [ctx.chainId, managerText],
      );
      const waiting = Number(head[0]?.waiting ?? 0);
      if (waiting === 0) return undefined;
      // Batching rule: a batch goes when it is full or its oldest record has waited `lingerMs`; records
      // arriving together become one transaction.
      if (!force && waiting < maxBatchSize && Number(head[0]?.age_ms ?? 0) < lingerMs) return "held";
      const batch = await queryOneParsed(
        tx,
        UsageBatchRowSchema,
        "INSERT INTO usage_batches (chain_id, manager, sender) VALUES ($1, $2, $3) RETURNING *",
        [ctx.chainId, managerText, sender],
      );
      if (batch === undefined) throw new TollgateError("Internal", "usage batch insert returned nothing");
      const rows = await queryParsed(
        tx,
        UsageRowSchema,
        `UPDATE usage_records SET status = 'submitted', batch_id = $1, attempts = attempts + 1, updated_at = now()
         WHERE id IN (SELECT id FROM usage_records WHERE status = 'pending' AND chain_id = $2 AND manager = $3
                      ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
         RETURNING *`,
        [batch.id, ctx.chainId, managerText, maxBatchSize],
      );
      if (rows.length === 0) {
        await tx.query("DELETE FROM usage_batches WHERE id = $1", [batch.id]);
        return undefined;
      }
      rows.sort((a, b) => a.id - b.id);
      await tx.query("UPDATE usage_batches SET item_count = $2 WHERE id = $1", [batch.id, rows.length]);
      return { batch: { ...batch, item_count: rows.length }, rows };
    });
  }

  async function batchRows(batchId: number): Promise<UsageRow[]> {
    return queryParsed(store, UsageRowSchema, "SELECT * FROM usage_records WHERE batch_id = $1 ORDER BY id", [
      batchId,
    ]);
  }

  async function fail(rowIds: readonly number[], code: string, message: string, txHash: Hash | null = null) {
    if (rowIds.length === 0) return;
    await store.query(
      `UPDATE usage_records SET status = 'failed', failure_code = $2, failure_message = $3, tx_hash = $4,
         updated_at = now() WHERE id = ANY($1::bigint[]) AND status = 'submitted'`,
      [rowIds.map(String), code, message, txHash],
    );
  }

  async function requeue(batchId: number, code: string, message: string): Promise<void> {
    await store.transaction(async (tx) => {
      await tx.query(
        `UPDATE usage_records SET status = CASE WHEN attempts >= $2 THEN 'failed' ELSE 'pending' END,
           failure_code = CASE WHEN attempts >= $2 THEN $3 END,
           failure_message = CASE WHEN attempts >= $2 THEN $4 END,
           batch_id = CASE WHEN attempts >= $2 THEN batch_id END, updated_at = now()
         WHERE batch_id = $1 AND status = 'submitted'`,
        [batchId, MAX_ATTEMPTS, code, message],
      );
      await tx.query("UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1", [
        batchId,
      ]);
    });
  }

  // ---- sending -----------------------------------------------------------------------------------

  function calldata(rows: readonly UsageRow[]): Hex {
    return encodeFunctionData({
      abi: subscriptionManagerAbi,
      functionName: "deductAllowanceMany",
      args: [rows.map((r) => r.subscription_id), rows.map((r) => r.amount), rows.map((r) => r.chain_ref)],
    });
  }

  /** Records of providers that have not made the facilitator their operator fail here, alone. */
  async function dropNonOperators(rows: UsageRow[]): Promise<UsageRow[]> {
    const providers = [...new Set(rows.map((r) => r.provider))];
    const allowed = new Set<string>();
    for (const provider of providers) {
      const ok = await client.readContract({
        address: manager,
        abi: subscriptionManagerAbi,
        functionName: "isOperator",
        args: [provider, gas.address],
      });
      if (ok) allowed.add(provider);
    }
    const refused = rows.filter((r) => !allowed.has(r.provider));
    await fail(
      refused.map((r) => r.id),
      "InvalidRequest",
      `the facilitator (${gas.address}) is not an operator of the provider: call setOperator on the SubscriptionManager`,
    );
    return rows.filter((r) => allowed.has(r.provider));
  }

  /** The plan token of each subscription: from the index, else read from the chain. */
  async function tokensOf(ids: readonly bigint[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    const rows = await store.query<{ subscription_id: string; token: string }>(
      `SELECT s.subscription_id::text AS subscription_id, p.token FROM subscriptions s
       JOIN plans p ON p.chain_id = s.chain_id AND p.manager = s.manager AND p.plan_id = s.plan_id
       WHERE s.chain_id = $1 AND s.manager = $2 AND s.subscription_id = ANY($3::numeric[])`,
      [ctx.chainId, managerText, ids.map(String)],
    );
    for (const row of rows) found.set(String(row.subscription_id), row.token.toLowerCase());
    for (const id of ids) {
      if (found.has(id.toString())) continue;
      const sub = await client.readContract({
        address: manager,
        abi: subscriptionManagerAbi,
        functionName: "subscriptions",
        args: [id],
      });
      const plan = await client.readContract({
        address: manager,
        abi: subscriptionManagerAbi,
        functionName: "plans",
        args: [sub.planId],
      });
      found.set(id.toString(), plan.token.toLowerCase());
    }
    return found;
  }

  /** Records on plans in a token this facilitator does not serve fail here, alone, unsent. */
  async function dropUnknownTokens(rows: UsageRow[]): Promise<UsageRow[]> {
    if (rows.length === 0) return rows;
    const tokens = await tokensOf([...new Set(rows.map((r) => r.subscription_id))]);
    const known = (r: UsageRow) => knownTokens.has(tokens.get(r.subscription_id.toString()) ?? "");
    await fail(
      rows.filter((r) => !known(r)).map((r) => r.id),
      "InvalidRequest",
      "the subscription's plan is in a token this facilitator does not settle",
    );
    return rows.filter(known);
  }

  /** The gas `deductAllowanceMany(rows)` needs, or undefined when the chain refuses it. */
  async function estimate(rows: readonly UsageRow[]): Promise<bigint | undefined> {
    try {
      return await client.estimateGas({ account: gas.address, to: manager, data: calldata(rows) });
    } catch (error) {
      if (isChainRefusal(error)) return undefined;
      throw error;
    }
  }

  /** The records among `rows` (a batch known to revert) that revert on their own, found by halving. */
  async function revertingAlone(rows: readonly UsageRow[]): Promise<UsageRow[]> {
    if (rows.length === 1) return [...rows];
    const half = Math.ceil(rows.length / 2);
    const out: UsageRow[] = [];
    for (const part of [rows.slice(0, half), rows.slice(half)]) {
      if ((await estimate(part)) === undefined) out.push(...(await revertingAlone(part)));
    }
    return out;
  }

  /** Fails records that revert alone, each with the reason its own simulation gives. */
  async function failReverting(rows: readonly UsageRow[]): Promise<void> {
    for (const row of rows) {
      const refusal = await client
        .simulateContract({
          address: manager,
          abi: subscriptionManagerAbi,
          functionName: "deductAllowanceMany",
          args: [[row.subscription_id], [row.amount], [row.chain_ref]],
          account: gas.address,
        })
        .then(
          () => new TollgateError("InvalidRequest", "the deduction reverts on chain"),
          (error: unknown) => toManagerError(error),
        );
      await fail([row.id], refusal.code, `the deduction reverts on chain on its own: ${refusal.message}`);
      log.warn({ record: row.id, code: refusal.code }, "usage record reverts alone; failed without the rest");
    }
  }

  async function broadcast(raw: Hex): Promise<"sent" | "known" | "nonce-used"> {
    try {
      await client.sendRawTransaction({ serializedTransaction: raw });
      return "sent";
    } catch (error) {
      const text =
        error instanceof Error
          ? `${error.message} ${String((error as { details?: unknown }).details ?? "")}`
          : "";
      if (/already known|already imported|known transaction/i.test(text)) return "known";
      if (/nonce too low|nonce has already been used|NonceTooLow/i.test(text)) return "nonce-used";
      throw error;
    }
  }

  /** Signs, records and broadcasts one batch, then records its outcome. */
  async function send(batch: UsageBatchRow, claimed: UsageRow[]): Promise<UsageRunResult> {
    let rows = await dropUnknownTokens(await dropNonOperators(claimed));
    let gasLimit = rows.length === 0 ? undefined : await estimate(rows);
    if (gasLimit === undefined && rows.length > 1) {
      const reverting = await revertingAlone(rows);
      if (reverting.length > 0 && reverting.length < rows.length) {
        await failReverting(reverting);
        rows = rows.filter((r) => !reverting.includes(r));
        gasLimit = await estimate(rows);
      }
    }
    const dropped = claimed.length - rows.length;
    if (rows.length === 0) {
      await store.query("UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1", [
        batch.id,
      ]);
      return { batches: 0, settled: 0, failed: dropped };
    }
    const data = calldata(rows);
    if (gasLimit === undefined) {
      // The whole call would revert and no record is to blame alone (a caller fault such as an
      // operator revoked a moment ago, or records that revert only together): decode why, and retry
      // the records a bounded number of times.
      const error = new Error("the deduction batch would revert");
      const refusal = await client
        .simulateContract({
          address: manager,
          abi: subscriptionManagerAbi,
          functionName: "deductAllowanceMany",
          args: [rows.map((r) => r.subscription_id), rows.map((r) => r.amount), rows.map((r) => r.chain_ref)],
          account: gas.address,
        })
        .then(() => toManagerError(error), toManagerError);
      log.warn(
        { batch: batch.id, code: refusal.code, err: error },
        "usage batch would revert; records requeued",
      );
      await requeue(batch.id, refusal.code, refusal.message);
      return { batches: 0, settled: 0, failed: dropped };
    }
    const fromBlock = await client.getBlockNumber({ cacheTime: 0 });
    const nonce = await gas.takeNonce();
    const raw = await gas.sign({ to: manager, data, gas: (gasLimit * 12n) / 10n, nonce });
    const hash = keccak256(raw);
    await store.query(
      `UPDATE usage_batches SET status = 'submitted', sender_nonce = $2, tx_hash = $3, raw_tx = $4, from_block = $5,
         item_count = $6, updated_at = now() WHERE id = $1`,
      [batch.id, nonce, hash, raw, fromBlock, rows.length],
    );
    await options.faults?.afterRecord?.(batch.id);
    const outcome = await drive(
      { ...batch, status: "submitted", tx_hash: hash, raw_tx: raw, from_block: fromBlock },
      true,
    );
    return { ...outcome, failed: outcome.failed + dropped };
  }

  /** Drives a signed, recorded batch to its recorded outcome. */
  async function drive(batch: UsageBatchRow, fresh: boolean): Promise<UsageRunResult> {
    const hash = batch.tx_hash as Hash;
    const raw = batch.raw_tx as Hex;
    if (!fresh) {
      const receipt = await client.getTransactionReceipt({ hash }).catch((error: unknown) => {
        if (isChainUnreachable(error)) throw error;
        return undefined;
      });
      if (receipt !== undefined) return recordReceipt(batch, receipt);
    }
    let sent: "sent" | "known" | "nonce-used";
    try {
      sent = await broadcast(raw);
    } catch (error) {
      if (isChainUnreachable(error)) throw error;
      // The node refuses the transaction for good: use its nonce up with an empty transfer so later
      // transactions of the gas account are not stuck behind it; the batch then resolves as displaced.
      log.error({ batch: batch.id, err: error }, "usage batch refused by the node; filling its nonce");
      if (batch.sender_nonce !== null) {
        const filler = await gas.sign({
          to: gas.address,
          data: "0x",
          gas: 21_000n,
          nonce: batch.sender_nonce,
        });
        await broadcast(filler).catch(() => undefined);
        await client
          .waitForTransactionReceipt({ hash: keccak256(filler), timeout: 60_000 })
          .catch(() => undefined);
      }
      sent = "nonce-used";
    }
    if (sent === "nonce-used") {
      const receipt = await client.getTransactionReceipt({ hash }).catch(() => undefined);
      if (receipt !== undefined) return recordReceipt(batch, receipt);
      gas.resync();
      return resolveDisplaced(batch);
    }
    await options.faults?.afterBroadcast?.(batch.id);
    const receipt = await client.waitForTransactionReceipt({ hash, confirmations, timeout: 120_000 });
    return recordReceipt(batch, receipt);
  }

  async function recordReceipt(batch: UsageBatchRow, receipt: TransactionReceipt): Promise<UsageRunResult> {
    if (receipt.status !== "success") {
      await requeue(batch.id, "ChainUnavailable", "the deduction transaction kept reverting");
      log.warn({ batch: batch.id, tx: receipt.transactionHash }, "usage batch reverted; records requeued");
      return { batches: 1, settled: 0, failed: 0 };
    }
    const outcomes = new Map<string, { ok: true } | { ok: false; reason: number }>();
    for (const event of parseEventLogs({ abi: subscriptionManagerAbi, logs: receipt.logs })) {
      if (event.address.toLowerCase() !== managerText) continue;
      if (event.eventName === "AllowanceDeducted") outcomes.set(event.args.ref.toLowerCase(), { ok: true });
      if (event.eventName === "DeductionFailed") {
        outcomes.set(event.args.ref.toLowerCase(), { ok: false, reason: event.args.reason });
      }
    }
    let settled = 0;
    let failed = 0;
    const rows = await batchRows(batch.id);
    await store.transaction(async (tx) => {
      for (const row of rows) {
        if (row.status !== "submitted") continue;
        const outcome = outcomes.get(row.chain_ref);
        if (outcome?.ok === true) {
          settled++;
          await tx.query(
            `UPDATE usage_records SET status = 'settled', tx_hash = $2, settled_at = now(), failure_code = NULL,
               failure_message = NULL, updated_at = now() WHERE id = $1`,
            [row.id, receipt.transactionHash],
          );
        } else if (outcome !== undefined) {
          failed++;
          const failure = failureByReason[outcome.reason] ?? {
            code: "InvalidRequest",
            message: `the deduction failed (reason ${outcome.reason})`,
          };
          await tx.query(
            `UPDATE usage_records SET status = 'failed', failure_code = $2, failure_message = $3, tx_hash = $4,
               updated_at = now() WHERE id = $1`,
            [row.id, failure.code, failure.message, receipt.transactionHash],
          );
        } else {
          // Not in this transaction (it carried fewer items, say after operator checks): queue it again.
          await tx.query(
            "UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now() WHERE id = $1",
            [row.id],
          );
        }
      }
      await tx.query(
        "UPDATE usage_batches SET status = 'confirmed', block_number = $2, updated_at = now() WHERE id = $1",
        [batch.id, receipt.blockNumber],
      );
    });
    log.info({ batch: batch.id, tx: receipt.transactionHash, settled, failed }, "usage batch settled");
    return { batches: 1, settled, failed };
  }

  /**
   * The batch's transaction can never be mined (its nonce went to another one): each record's fate is
   * read from the chain by its ref, and records not deducted go back to the queue.
   */
  async function resolveDisplaced(batch: UsageBatchRow): Promise<UsageRunResult> {
    const rows = await batchRows(batch.id);
    let settled = 0;
    for (const row of rows) {
      if (row.status !== "submitted") continue;
      const logs = await client.getLogs({
        address: manager,
        event: getAbiItem({ abi: subscriptionManagerAbi, name: "AllowanceDeducted" }),
        args: { ref: row.chain_ref },
        fromBlock: batch.from_block ?? 0n,
      });
      const found = logs[0];
      if (found !== undefined) {
        settled++;
        await store.query(
          `UPDATE usage_records SET status = 'settled', tx_hash = $2, settled_at = now(), updated_at = now()
           WHERE id = $1 AND status = 'submitted'`,
          [row.id, found.transactionHash],
        );
      } else {
        await store.query(
          `UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now()
           WHERE id = $1 AND status = 'submitted'`,
          [row.id],
        );
      }
    }
    await store.query("UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1", [
      batch.id,
    ]);
    return { batches: 0, settled, failed: 0 };
  }

  async function reconcileUnserialized(): Promise<UsageRunResult> {
    const total: UsageRunResult = { batches: 0, settled: 0, failed: 0 };
    const open = await queryParsed(
      store,
      UsageBatchRowSchema,
      `SELECT * FROM usage_batches WHERE chain_id = $1 AND manager = $2 AND sender = $3
         AND status IN ('pending', 'submitted') ORDER BY id`,
      [ctx.chainId, managerText, sender],
    );
    for (const batch of open) {
      if (batch.raw_tx === null || batch.tx_hash === null) {
        // Claimed but never signed: nothing can have been broadcast. Release its records.
        await store.transaction(async (tx) => {
          await tx.query(
            `UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now()
             WHERE batch_id = $1 AND status = 'submitted'`,
            [batch.id],
          );
          await tx.query("UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1", [
            batch.id,
          ]);
        });
        continue;
      }
      add(total, await drive(batch, false));
    }
    return total;
  }

  function add(total: UsageRunResult, part: UsageRunResult): void {
    total.batches += part.batches;
    total.settled += part.settled;
    total.failed += part.failed;
  }

  async function tick(force: boolean): Promise<UsageRunResult & { held: boolean }> {
    const total = { ...(await reconcileUnserialized()), held: false };
    let changed = total.batches > 0;
    for (;;) {
      const claimed = await claim(force);
      if (claimed === undefined) break;
      if (claimed === "held") {
        total.held = true;
        break;
      }
      add(total, await send(claimed.batch, claimed.rows));
      changed = true;
    }
    if (changed) {
      await options.indexer?.syncOnce().catch((error: unknown) => {
        log.warn({ err: error }, "index sync after usage settlement failed; the indexer will retry");
      });
    }
    return total;
  }

  async function loop(): Promise<void> {
    let failing = false;
    while (running) {
      dirty = false;
      let held = false;
      try {
        held = (await serialized(() => tick(false))).held;
        failing = false;
      } catch (error) {
        if (!failing) {
          if (isChainUnreachable(error)) log.warn("chain unreachable; usage settlement waits");
          else log.error({ err: error }, "usage settlement failed; it will be retried");
        }
        failing = true;
      }
      if (!running) break;
      if (dirty && !held) continue;
      await sleeper.pause(held ? lingerMs : pollIntervalMs);
    }
  }

  return {
    signal() {
      dirty = true;
      sleeper.wake();
    },
    async runOnce() {
      const { held: _held, ...result } = await serialized(() => tick(true));
      return result;
    },
    async reconcile() {
      await serialized(reconcileUnserialized);
    },
    async start() {
      if (running) return;
      running = true;
      loopDone = loop();
    },
    async stop() {
      running = false;
      sleeper.wake();
      await loopDone;
      await queue;
    },
  };
}
