/**
 * Settles recorded usage on chain in batches with `SubscriptionManager.deductAllowanceMany`, one
 * transaction for many records, each with its own outcome (docs/facilitator.md; docs/gate.md).
 *
 * Invariants (the settlement engine's, applied to deductions):
 * 1. A record is stored `pending` by `POST /usage` before anything is sent.
 * 2. Records are claimed into a batch (`submitted`) with `FOR UPDATE SKIP LOCKED`; once checked, the
 *    batch's `deductAllowanceMany` call is queued in the transaction outbox (kind `usage`) in the store
 *    transaction that marks the batch submitted. The outbox signs and records it before it is
 *    broadcast; after a crash it is looked up or broadcast again, never re-signed with other contents.
 * 3. Outcomes are recorded by the outbox handler of kind `usage`, in the store transaction that closes
 *    the outbox row (so exactly once), and come only from a receipt's per-item events (AllowanceDeducted / DeductionFailed, matched
 *    by each record's unique bytes32 ref) or, when the recorded transaction lost its nonce to another,
 *    from the chain's AllowanceDeducted logs for each ref. A record whose deduction is not on chain
 *    goes back to the queue, so no path deducts twice or loses a deduction. Beneath all of it the
 *    contract deducts a provider's ref at most once: an item sent again fails `RefUsed`, which is
 *    recorded as settled (by the earlier deduction's transaction), never as failed.
 *
 * 4. A claimed batch is queued or released, never both: queueing and releasing are each a compare-and-set
 *    on the batch's `pending` status (the batch row is locked), and only a batch no worker has touched
 *    for `abandonedAfterMs` is released. Instances sharing a gas key see each other's batches; a batch
 *    another live instance is still checking (operator, token, gas estimate) was once released and its
 *    records claimed again, while the first instance went on to queue it: each deduction landed twice.
 *    Records are failed while checking only as long as they still belong to the batch.
 *
 * 5. One record cannot hold back the others. A record on a plan whose token the facilitator does not
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
import { type Address, type Hash, keccak256, type Log, parseEventLogs, parseTransaction } from "viem";
import { deductAllowanceManyCall } from "../../../chain/actions/subscriptions/deductAllowanceManyCall.ts";
import { estimateDeductAllowanceMany } from "../../../chain/actions/subscriptions/estimateDeductAllowanceMany.ts";
import { getAllowanceDeductedLogs } from "../../../chain/actions/subscriptions/getAllowanceDeductedLogs.ts";
import { getIsOperator } from "../../../chain/actions/subscriptions/getIsOperator.ts";
import { getPlan } from "../../../chain/actions/subscriptions/getPlan.ts";
import { getSubscription } from "../../../chain/actions/subscriptions/getSubscription.ts";
import { simulateDeductAllowanceMany } from "../../../chain/actions/subscriptions/simulateDeductAllowanceMany.ts";
import { subscriptionManagerAbi } from "../../../chain/contracts/artifacts/SubscriptionManager.ts";
import { DeductionFailure } from "../../../chain/events/subscriptionStatus.ts";
import { isChainUnreachable } from "../../../facilitator/chainErrors.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import type { OutboxFaults } from "../../../facilitator/outbox/createOutbox.ts";
import { outboxFor } from "../../../facilitator/outbox/outboxFor.ts";
import { insertSignedRow } from "../../../facilitator/outbox/outboxRecords.ts";
import type { Outbox, OutboxHandler } from "../../../facilitator/outbox/outboxTypes.ts";
import { createWakeablePause, IDLE_BACKSTOP_MS } from "../../../facilitator/wakeablePause.ts";
import { type ErrorCode, TollgateError } from "../../../protocol/errors.ts";
import { queryOneParsed, queryParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";
import { isChainRefusal } from "../../subscription/facilitator/chainRefusal.ts";
import { toManagerError } from "../../subscription/facilitator/managerErrors.ts";
import type { SubscriptionIndexer } from "../../subscription/facilitator/subscriptionIndexer.ts";
import { type UsageBatchRow, UsageBatchRowSchema, type UsageRow, UsageRowSchema } from "./usageRecords.ts";

export type UsageSettlerOptions = {
  /** Records per transaction (default 100). */
  maxBatchSize?: number | undefined;
  /** How long the oldest pending record may wait for others to fill its batch (default 500 ms). */
  lingerMs?: number | undefined;
  /**
   * How long the loop sleeps with nothing to do before it looks anyway (default 30 s): usage recorded
   * here or in another instance wakes it at once (the store's `usage` notification).
   */
  pollIntervalMs?: number | undefined;
  /**
   * How long a claimed batch may sit unqueued before a settler releases its records (default 30 s): one
   * claimed by an instance that died before queueing it. A live instance whose batch was released
   * meanwhile does not queue it (the compare-and-set on its status fails).
   */
  abandonedAfterMs?: number | undefined;
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
  "store" | "publicClient" | "gas" | "chainId" | "subscriptionManager" | "logger" | "tokens" | "tokenPause"
> &
  Partial<Pick<FacilitatorContext, "logsRange">>;

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

/** The outbox kind of usage deduction batches. */
export const USAGE_KIND = "usage";

export function createUsageSettler(
  ctx: SettlerContext & Partial<Pick<FacilitatorContext, "outbox" | "clock">>,
  options: UsageSettlerOptions & {
    indexer?: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
    outbox?: Outbox | undefined;
  } = {},
): UsageSettler {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the usage settler needs a SubscriptionManager address");
  }
  const manager: Address = ctx.subscriptionManager;
  const managerText = manager.toLowerCase();
  const { store, publicClient: client, gas } = ctx;
  const maxBatchSize = options.maxBatchSize ?? 100;
  const lingerMs = options.lingerMs ?? 500;
  const abandonedAfterMs = options.abandonedAfterMs ?? 30_000;
  // Usage recorded here or in another instance wakes the loop (the store's `usage` notification).
  const pollIntervalMs = options.pollIntervalMs ?? IDLE_BACKSTOP_MS;
  const sender = gas.address.toLowerCase();
  const knownTokens = new Set(ctx.tokens.map((token) => token.address.toLowerCase()));
  const log: Logger = ctx.logger.child({ component: "usage-settler" });
  const outbox =
    options.outbox ??
    outboxFor(ctx, { faults: usageFaults(options.faults), confirmations: options.confirmations });

  let queue: Promise<unknown> = Promise.resolve();
  let running = false;
  let loopDone: Promise<void> | undefined;
  let unlisten: (() => Promise<void>) | undefined;
  let stopResume: (() => void) | undefined;
  const sleeper = createWakeablePause();
  let dirty = false;
  /** When a claimed batch left unqueued (another instance's, or a dead one's) may be released, if any. */
  let releaseDueInMs: number | undefined;

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

  async function batchRows(db: Queryable, batchId: number): Promise<UsageRow[]> {
    return queryParsed(db, UsageRowSchema, "SELECT * FROM usage_records WHERE batch_id = $1 ORDER BY id", [
      batchId,
    ]);
  }

  /** Fails records of `batchId` that still belong to it (a batch released meanwhile fails nothing). */
  async function fail(batchId: number, rowIds: readonly number[], code: string, message: string) {
    if (rowIds.length === 0) return;
    await store.query(
      `UPDATE usage_records SET status = 'failed', failure_code = $2, failure_message = $3, updated_at = now()
       WHERE id = ANY($1::bigint[]) AND status = 'submitted' AND batch_id = $4`,
      [rowIds.map(String), code, message, batchId],
    );
  }

  async function requeue(db: Queryable, batchId: number, code: string, message: string): Promise<void> {
    await db.query(
      `UPDATE usage_records SET status = CASE WHEN attempts >= $2 THEN 'failed' ELSE 'pending' END,
         failure_code = CASE WHEN attempts >= $2 THEN $3 END,
         failure_message = CASE WHEN attempts >= $2 THEN $4 END,
         batch_id = CASE WHEN attempts >= $2 THEN batch_id END, updated_at = now()
       WHERE batch_id = $1 AND status = 'submitted'`,
      [batchId, MAX_ATTEMPTS, code, message],
    );
    await db.query("UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1", [batchId]);
  }

  // ---- checking a batch before it is queued --------------------------------------------------------

  function deduction(rows: readonly UsageRow[]) {
    return {
      manager,
      subscriptionIds: rows.map((r) => r.subscription_id),
      amounts: rows.map((r) => r.amount),
      refs: rows.map((r) => r.chain_ref),
    };
  }

  /** Records of providers that have not made the facilitator their operator fail here, alone. */
  async function dropNonOperators(batchId: number, rows: UsageRow[]): Promise<UsageRow[]> {
    const providers = [...new Set(rows.map((r) => r.provider))];
    const allowed = new Set<string>();
    for (const provider of providers) {
      if (await getIsOperator(client, { manager, provider, operator: gas.address })) allowed.add(provider);
    }
    const refused = rows.filter((r) => !allowed.has(r.provider));
    await fail(
      batchId,
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
      const sub = await getSubscription(client, { manager, subscriptionId: id });
      const plan = await getPlan(client, { manager, planId: sub.planId });
      found.set(id.toString(), plan.token.toLowerCase());
    }
    return found;
  }

  /** Records on plans in a token this facilitator does not serve fail here, alone, unsent. */
  async function dropUnknownTokens(batchId: number, rows: UsageRow[]): Promise<UsageRow[]> {
    if (rows.length === 0) return rows;
    const tokens = await tokensOf([...new Set(rows.map((r) => r.subscription_id))]);
    const known = (r: UsageRow) => knownTokens.has(tokens.get(r.subscription_id.toString()) ?? "");
    await fail(
      batchId,
      rows.filter((r) => !known(r)).map((r) => r.id),
      "InvalidRequest",
      "the subscription's plan is in a token this facilitator does not settle",
    );
    return rows.filter(known);
  }

  /** The gas `deductAllowanceMany(rows)` needs, or undefined when the chain refuses it. */
  async function estimate(rows: readonly UsageRow[]): Promise<bigint | undefined> {
    try {
      return await estimateDeductAllowanceMany(client, { ...deduction(rows), account: gas.address });
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

  /** Why `rows` revert, decoded from a simulation. */
  async function refusalOf(rows: readonly UsageRow[], fallback: Error): Promise<TollgateError> {
    return simulateDeductAllowanceMany(client, { ...deduction(rows), account: gas.address }).then(
      () => toManagerError(fallback),
      (error: unknown) => toManagerError(error),
    );
  }

  /** Fails records that revert alone, each with the reason its own simulation gives. */
  async function failReverting(batchId: number, rows: readonly UsageRow[]): Promise<void> {
    for (const row of rows) {
      const refusal = await refusalOf([row], new Error("the deduction reverts on chain"));
      await fail(
        batchId,
        [row.id],
        refusal.code,
        `the deduction reverts on chain on its own: ${refusal.message}`,
      );
      log.warn({ record: row.id, code: refusal.code }, "usage record reverts alone; failed without the rest");
    }
  }

  /** Checks a claimed batch and queues its transaction in the outbox; returns the outbox row, if any. */
  async function send(
    batch: UsageBatchRow,
    claimed: UsageRow[],
  ): Promise<{ outboxId?: number; failed: number }> {
    let rows = await dropUnknownTokens(batch.id, await dropNonOperators(batch.id, claimed));
    let gasLimit = rows.length === 0 ? undefined : await estimate(rows);
    if (gasLimit === undefined && rows.length > 1) {
      const reverting = await revertingAlone(rows);
      if (reverting.length > 0 && reverting.length < rows.length) {
        await failReverting(batch.id, reverting);
        rows = rows.filter((r) => !reverting.includes(r));
        gasLimit = await estimate(rows);
      }
    }
    const dropped = claimed.length - rows.length;
    if (rows.length === 0) {
      await store.query(
        "UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1 AND status = 'pending'",
        [batch.id],
      );
      return { failed: dropped };
    }
    if (gasLimit === undefined) {
      // The whole call would revert and no record is to blame alone (a caller fault such as an
      // operator revoked a moment ago, or records that revert only together): decode why, and retry
      // the records a bounded number of times.
      const error = new Error("the deduction batch would revert");
      const refusal = await refusalOf(rows, error);
      log.warn(
        { batch: batch.id, code: refusal.code, err: error },
        "usage batch would revert; records requeued",
      );
      await store.transaction(async (tx) => {
        if (await holdPending(tx, batch.id, rows)) await requeue(tx, batch.id, refusal.code, refusal.message);
      });
      return { failed: dropped };
    }
    const call = deductAllowanceManyCall({ ...deduction(rows), gas: (gasLimit * 12n) / 10n });
    const outboxId = await store.transaction(async (tx) => {
      if (!(await holdPending(tx, batch.id, rows))) return undefined;
      const id = await outbox.enqueue(tx, { ...call, kind: USAGE_KIND, owner: String(batch.id) });
      await tx.query(
        `UPDATE usage_batches SET status = 'submitted', item_count = $2, outbox_id = $3, updated_at = now()
         WHERE id = $1`,
        [batch.id, rows.length, id],
      );
      return id;
    });
    if (outboxId === undefined) {
      log.warn({ batch: batch.id }, "usage batch was released while it was checked; not sent");
      return { failed: 0 };
    }
    outbox.wake();
    return { outboxId, failed: dropped };
  }

  /**
   * Locks the batch and tells whether it is still `pending` with every one of `rows` in it: only then
   * may it be queued (or requeued). A batch released meanwhile (its records may be in another batch
   * already) is left as it is.
   */
  async function holdPending(tx: Queryable, batchId: number, rows: readonly UsageRow[]): Promise<boolean> {
    const held = await tx.query(
      "SELECT id FROM usage_batches WHERE id = $1 AND status = 'pending' FOR UPDATE",
      [batchId],
    );
    if (held.length === 0) return false;
    const mine = await tx.query<{ id: string }>(
      `SELECT id FROM usage_records WHERE id = ANY($1::bigint[]) AND batch_id = $2 AND status = 'submitted'
       FOR UPDATE`,
      [rows.map((r) => String(r.id)), batchId],
    );
    return mine.length === rows.length;
  }

  // ---- outcomes (the outbox handler) -----------------------------------------------------------------

  type ItemOutcome = { ok: true; hash: Hash } | { ok: false; reason: number };

  /**
   * Each ref's outcome in a receipt. An item the contract skipped because the provider deducted under
   * its ref before (`RefUsed`) is a deduction that landed: its record is settled, with the transaction
   * of the earlier deduction when the chain's logs still show it.
   */
  async function receiptOutcomes(receipt: { hash: Hash; logs: Log[] }): Promise<Map<string, ItemOutcome>> {
    const outcomes = new Map<string, ItemOutcome>();
    for (const event of parseEventLogs({ abi: subscriptionManagerAbi, logs: receipt.logs })) {
      if (event.address.toLowerCase() !== managerText) continue;
      if (event.eventName === "AllowanceDeducted") {
        outcomes.set(event.args.ref.toLowerCase(), { ok: true, hash: receipt.hash });
        continue;
      }
      if (event.eventName !== "DeductionFailed") continue;
      const ref = event.args.ref.toLowerCase();
      if (event.args.reason === DeductionFailure.RefUsed) {
        const earlier = await getAllowanceDeductedLogs(client, {
          manager,
          ref: event.args.ref,
          fromBlock: 0n,
          maxRange: ctx.logsRange,
        }).catch(() => []);
        outcomes.set(ref, { ok: true, hash: earlier[0]?.transactionHash ?? receipt.hash });
        log.warn({ ref, earlier: earlier[0]?.transactionHash }, "usage ref was deducted before; not again");
      } else {
        outcomes.set(ref, { ok: false, reason: event.args.reason });
      }
    }
    return outcomes;
  }

  async function recordReceipt(
    db: Queryable,
    batchId: number,
    receipt: { hash: Hash; blockNumber: bigint },
    outcomes: ReadonlyMap<string, ItemOutcome>,
  ): Promise<void> {
    let settled = 0;
    let failed = 0;
    for (const row of await batchRows(db, batchId)) {
      if (row.status !== "submitted") continue;
      const outcome = outcomes.get(row.chain_ref);
      if (outcome?.ok === true) {
        settled++;
        await db.query(
          `UPDATE usage_records SET status = 'settled', tx_hash = $2, settled_at = now(), failure_code = NULL,
             failure_message = NULL, updated_at = now() WHERE id = $1`,
          [row.id, outcome.hash],
        );
      } else if (outcome !== undefined) {
        failed++;
        const failure = failureByReason[outcome.reason] ?? {
          code: "InvalidRequest",
          message: `the deduction failed (reason ${outcome.reason})`,
        };
        await db.query(
          `UPDATE usage_records SET status = 'failed', failure_code = $2, failure_message = $3, tx_hash = $4,
             updated_at = now() WHERE id = $1`,
          [row.id, failure.code, failure.message, receipt.hash],
        );
      } else {
        // Not in this transaction (it carried fewer items, say after operator checks): queue it again.
        await db.query(
          "UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now() WHERE id = $1",
          [row.id],
        );
      }
    }
    await db.query(
      `UPDATE usage_batches SET status = 'confirmed', tx_hash = $2, block_number = $3, updated_at = now()
       WHERE id = $1`,
      [batchId, receipt.hash, receipt.blockNumber],
    );
    log.info({ batch: batchId, tx: receipt.hash, settled, failed }, "usage batch settled");
  }

  const handler: OutboxHandler = async (outcome, commit) => {
    const batchId = Number(outcome.owner);
    if (outcome.status === "confirmed") {
      const outcomes = await receiptOutcomes(outcome);
      await commit((tx) => recordReceipt(tx, batchId, outcome, outcomes));
    } else if (outcome.status === "reverted") {
      await commit((tx) =>
        requeue(tx, batchId, "ChainUnavailable", "the deduction transaction kept reverting"),
      );
      log.warn({ batch: batchId, tx: outcome.hash }, "usage batch reverted; records requeued");
    } else {
      // Never mined: each record's fate is read from the chain by its ref; records not deducted go back.
      const rows = (await batchRows(store, batchId)).filter((r) => r.status === "submitted");
      const found = new Map<number, Hash>();
      for (const row of rows) {
        const logs = await getAllowanceDeductedLogs(client, {
          manager,
          ref: row.chain_ref,
          fromBlock: outcome.fromBlock ?? 0n,
          maxRange: ctx.logsRange,
        });
        if (logs[0] !== undefined) found.set(row.id, logs[0].transactionHash);
      }
      await commit(async (tx) => {
        for (const row of rows) {
          const hash = found.get(row.id);
          await tx.query(
            hash === undefined
              ? `UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now()
                 WHERE id = $1 AND status = 'submitted'`
              : `UPDATE usage_records SET status = 'settled', tx_hash = $2, settled_at = now(), updated_at = now()
                 WHERE id = $1 AND status = 'submitted'`,
            hash === undefined ? [row.id] : [row.id, hash],
          );
        }
        await tx.query("UPDATE usage_batches SET status = 'failed', updated_at = now() WHERE id = $1", [
          batchId,
        ]);
      });
    }
  };
  outbox.handle(USAGE_KIND, handler);
  // A deduction batch a reorganisation undid (outbox/confirmedRowWatch.ts): in the transaction that
  // reopens its outbox row, the batch goes back to `submitted`, and so do the records its receipt
  // settled or failed (tx_hash names it), so the handler records the re-sent transaction's receipt as a
  // first outcome: settled once, or failed with the reason the new chain gives. Records settled by an
  // earlier transaction (a ref used before) keep it. Compare-and-set on each state left.
  outbox.onReorg(USAGE_KIND, async (tx, row) => {
    const batches = await tx.query<{ id: string }>(
      `UPDATE usage_batches SET status = 'submitted', block_number = NULL, updated_at = now()
       WHERE outbox_id = $1 AND status = 'confirmed' RETURNING id`,
      [row.id],
    );
    const batchId = batches[0]?.id;
    if (batchId === undefined) return;
    const records = await tx.query(
      `UPDATE usage_records SET status = 'submitted', settled_at = NULL, failure_code = NULL,
         failure_message = NULL, updated_at = now()
       WHERE batch_id = $1 AND status IN ('settled', 'failed') AND tx_hash = $2 RETURNING id`,
      [batchId, row.hash.toLowerCase()],
    );
    log.warn(
      { batch: Number(batchId), tx: row.hash, records: records.length },
      "a usage batch left the chain (a reorganisation); its transaction is sent again",
    );
  });

  /** Waits for a queued batch's outcome and counts what it recorded. */
  async function outcomeOf(batchId: number, outboxId: number): Promise<UsageRunResult> {
    const outcome = await outbox.waitFor(outboxId);
    const counts = await store.query<{ status: string; n: string }>(
      `SELECT status, count(*) AS n FROM usage_records WHERE batch_id = $1 GROUP BY status`,
      [batchId],
    );
    const count = (status: string) => Number(counts.find((c) => c.status === status)?.n ?? 0);
    return {
      batches: outcome.status === "dropped" ? 0 : 1,
      settled: count("settled"),
      failed: outcome.status === "confirmed" ? count("failed") : 0,
    };
  }

  /**
   * Open batches: those never queued (a crash between claim and queueing) release their records; those
   * recorded by an older version (signed into `usage_batches` itself) are adopted by the outbox; the
   * rest are waited for.
   */
  async function reconcileUnserialized(): Promise<UsageRunResult> {
    const total: UsageRunResult = { batches: 0, settled: 0, failed: 0 };
    releaseDueInMs = undefined;
    const open = await store.query<{
      id: string;
      outbox_id: string | null;
      raw_tx: string | null;
      idle_ms: string;
    }>(
      `SELECT id, outbox_id, raw_tx, floor(extract(epoch FROM now() - updated_at) * 1000)::bigint AS idle_ms
       FROM usage_batches WHERE chain_id = $1 AND manager = $2 AND sender = $3
         AND status IN ('pending', 'submitted') ORDER BY id`,
      [ctx.chainId, managerText, sender],
    );
    for (const batch of open) {
      const batchId = Number(batch.id);
      if (batch.outbox_id !== null) {
        add(total, await outcomeOf(batchId, Number(batch.outbox_id)));
        continue;
      }
      if (batch.raw_tx !== null) {
        const full = await queryOneParsed(
          store,
          UsageBatchRowSchema,
          "SELECT * FROM usage_batches WHERE id = $1",
          [batchId],
        );
        if (full !== undefined) {
          const outboxId = await adoptSignedBatch(full);
          add(total, await outcomeOf(batchId, outboxId));
          continue;
        }
      }
      // Claimed and not queued: another instance of this gas key may be checking it right now, so only a
      // batch idle for `abandonedAfterMs` is released, and only while it is still unqueued (the compare-
      // and-set its queueing also makes). Nothing of it can have been broadcast.
      const dueInMs = abandonedAfterMs - Number(batch.idle_ms);
      if (dueInMs > 0) {
        // Looked at again once it may be released, also when nothing else wakes this loop.
        releaseDueInMs = Math.min(releaseDueInMs ?? dueInMs, dueInMs);
        continue;
      }
      await store.transaction(async (tx) => {
        const released = await tx.query(
          `UPDATE usage_batches SET status = 'failed', updated_at = now()
           WHERE id = $1 AND status = 'pending' AND outbox_id IS NULL AND raw_tx IS NULL RETURNING id`,
          [batchId],
        );
        if (released.length === 0) return;
        await tx.query(
          `UPDATE usage_records SET status = 'pending', batch_id = NULL, updated_at = now()
           WHERE batch_id = $1 AND status = 'submitted'`,
          [batchId],
        );
      });
    }
    return total;
  }

  async function adoptSignedBatch(batch: UsageBatchRow): Promise<number> {
    const raw = batch.raw_tx as `0x${string}`;
    const parsed = parseTransaction(raw);
    return store.transaction(async (tx) => {
      const id = await insertSignedRow(
        tx,
        { chainId: ctx.chainId, sender: gas.address },
        {
          kind: USAGE_KIND,
          owner: String(batch.id),
          to: parsed.to as Address,
          data: parsed.data ?? "0x",
          gas: parsed.gas ?? 0n,
          nonce: batch.sender_nonce ?? Number(parsed.nonce ?? 0),
          hash: keccak256(raw),
          raw,
          fromBlock: batch.from_block,
        },
      );
      await tx.query("UPDATE usage_batches SET outbox_id = $2 WHERE id = $1", [batch.id, id]);
      return id;
    });
  }

  function add(total: UsageRunResult, part: UsageRunResult): void {
    total.batches += part.batches;
    total.settled += part.settled;
    total.failed += part.failed;
  }

  async function tick(force: boolean): Promise<UsageRunResult & { held: boolean }> {
    const total = { ...(await reconcileUnserialized()), held: false };
    let changed = total.batches > 0;
    // A served token paused by its issuer: every pull in it would fail its record, so no record is
    // claimed until the unpause wakes the loop (records are not sorted by token before they are claimed).
    const paused = (ctx.tokenPause?.heldTokens().length ?? 0) > 0;
    for (; !paused; ) {
      const claimed = await claim(force);
      if (claimed === undefined) break;
      if (claimed === "held") {
        total.held = true;
        break;
      }
      const sent = await send(claimed.batch, claimed.rows);
      total.failed += sent.failed;
      if (sent.outboxId !== undefined) add(total, await outcomeOf(claimed.batch.id, sent.outboxId));
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
      const idle =
        releaseDueInMs === undefined ? pollIntervalMs : Math.min(pollIntervalMs, releaseDueInMs + 100);
      await sleeper.pause(held ? lingerMs : idle);
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
      if (outbox !== ctx.outbox) await outbox.start();
      unlisten = await store.listen("usage", () => this.signal());
      stopResume = ctx.tokenPause?.onResume(() => this.signal());
      loopDone = loop();
    },
    async stop() {
      running = false;
      sleeper.wake();
      await loopDone;
      await queue;
      await unlisten?.();
      unlisten = undefined;
      stopResume?.();
      if (outbox !== ctx.outbox) await outbox.stop();
    },
  };
}

/** The settler's crash-test faults as the outbox's, for rows of kind `usage`. */
function usageFaults(faults: UsageSettlerOptions["faults"]): OutboxFaults | undefined {
  if (faults === undefined) return undefined;
  return {
    afterSign: async (row) => {
      if (row.kind === USAGE_KIND) await faults.afterRecord?.(Number(row.owner));
    },
    afterBroadcast: async (row) => {
      if (row.kind === USAGE_KIND) await faults.afterBroadcast?.(Number(row.owner));
    },
  };
}
