/**
 * What a settlement batch's transaction did to its payments: the outbox handler of kind `settlement`.
 * Chain reads happen first; every write then commits in the one store transaction that records the
 * outbox row's outcome, so a batch's outcome is recorded once whatever crashes (invariants 3–5 of
 * settlementEngine.ts).
 *
 * - confirmed: each item per BatchSettler's events — `Settled` settles it, `SettleFailed` fails it
 *   (unless its nonce was used by exactly this transfer elsewhere: settled), no event (deferred for gas)
 *   requeues it without counting an attempt, and so does a refusal because the token is paused
 *   (`TokenPaused`: the engine holds it until the unpause; reverted batches alike).
 * - reverted: nothing moved. Each item is checked again; those still good go back to the queue capped
 *   at half the batch's size, so a poisonous item ends alone and fails after MAX_ATTEMPTS.
 * - dropped: the transaction will never be mined; each item's fate is read from the token itself.
 */
import type { Logger } from "pino";
import type { Address, Hash, Hex } from "viem";
import { readSettlerLogs } from "../../chain/events/settlerLogs.ts";
import { type Clock, unixSeconds } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { Queryable, Store } from "../../store/store.ts";
import { refusalFromRevert } from "../chainErrors.ts";
import type { OutboxHandler, OutboxOutcome } from "../outbox/outboxTypes.ts";
import { batchPayments, type PaymentRow } from "../paymentRecords.ts";
import type { PaymentChecks, Recheck } from "./paymentChecks.ts";
import {
  type BatchClose,
  markPaymentFailed,
  markPaymentsSettled,
  type PaymentOutcomeDeps,
  requeuePayment,
  type Settlement,
} from "./paymentOutcomes.ts";

/**
 * Attempts for a payment whose batch transaction reverted while it was alone in it (after the splits
 * that isolate it), before it fails.
 */
const MAX_ATTEMPTS = 3;
/** A bound on attempts whatever the batch size, so no payment cycles for ever. */
const MAX_TOTAL_ATTEMPTS = 16;

export type BatchOutcomeDeps = PaymentOutcomeDeps & {
  store: Store;
  batchSettler: Address;
  checks: PaymentChecks;
  clock: Clock;
  logger: Logger;
  metrics?:
    | { onSettled(count: number, volume: bigint, token: string): void; onLatency(seconds: number): void }
    | undefined;
  /**
   * The payments this process claimed into `batchId`, as the claim wrote them, if it still holds them
   * (it forgets them here): the outcome then need not read them back. Every write of an outcome is a
   * compare-and-set on the row being submitted in this batch, so a row another instance changed since
   * the claim is left alone. Without them (another process claimed the batch, a restart), the rows
   * are read from the store.
   */
  claimedRows?: ((batchId: number) => PaymentRow[] | undefined) | undefined;
  /**
   * Items were refused because the token's issuer paused it (tokenPauseWatch.ts `suspect`): they went
   * back to the queue without counting an attempt, and the engine holds them until it is unpaused.
   */
  onTokenPaused?: ((token: string) => void) | undefined;
  /**
   * After the outcome committed: the batch's payments (to wake their waiters), the rows it settled as
   * they now are (so a waiter need not read them again), and whether it put any back in the queue.
   */
  afterCommit(
    batchId: number,
    rows: readonly PaymentRow[],
    settled: readonly PaymentRow[],
    requeued: boolean,
  ): void;
};

/**
 * What one outcome's store transaction did, for `afterCommit`: the rows it settled, and whether it put
 * any back in the queue. Emptied at the start of each try of the commit callback.
 */
type Recorded = { settled: PaymentRow[]; requeued: boolean };

/** A payment to settle in the commit that closes its batch, and how it was settled. */
type SettleItem = { row: PaymentRow; settled: Settlement };
type Commit = Parameters<OutboxHandler>[1];
type ConfirmedOutcome = Extract<OutboxOutcome, { status: "confirmed" }>;
/** What the handler's parts share: its dependencies and its logger. */
type OutcomeContext = { deps: BatchOutcomeDeps; log: Logger };

export function createBatchOutcomeHandler(deps: BatchOutcomeDeps): OutboxHandler {
  const ctx: OutcomeContext = { deps, log: deps.logger.child({ component: "settlement" }) };
  return async (outcome, commit) => {
    const batchId = Number(outcome.owner);
    const rows = deps.claimedRows?.(batchId) ?? (await batchPayments(deps.store, batchId));
    const recorded: Recorded = { settled: [], requeued: false };
    if (outcome.status === "confirmed") await confirmed(ctx, batchId, rows, outcome, commit, recorded);
    else if (outcome.status === "reverted")
      await reverted(ctx, batchId, rows, outcome.hash, commit, recorded);
    else await dropped(ctx, batchId, rows, commit, recorded);
    deps.afterCommit(batchId, rows, recorded.settled, recorded.requeued);
  };
}

/** Starts a try of an outcome's commit afresh: what an aborted try recorded was never committed. */
function resetRecorded(recorded: Recorded): void {
  recorded.settled.length = 0;
  recorded.requeued = false;
}

/**
 * Ends an outcome's commit: settles the rows gathered in `settle` and closes the batch in one
 * statement, and keeps the settled rows in `into.settled`.
 */
async function settleAndClose(
  deps: BatchOutcomeDeps,
  into: Recorded,
  tx: Queryable,
  settle: SettleItem[],
  close: BatchClose,
): Promise<void> {
  into.settled.push(...(await markPaymentsSettled(deps, tx, settle, { close })));
}

/** What BatchSettler reported for one item, keyed by `payer:nonce`; a deferred item has no entry. */
type ItemResult = { ok: true } | { ok: false; reason: Hex };

/** The chain reads a confirmed batch's refused items need, made before the commit. */
type RefusalReads = {
  /** Items whose nonce was used by exactly this transfer in another transaction, by nonce. */
  elsewhere: Map<string, { hash: Hash; blockNumber: bigint }>;
  /** Refusals with the blacklisted account named, by nonce. */
  refusals: Map<string, TollgateError>;
};

/** How many items a confirmed batch's commit settled (and for how much), deferred and held for a pause. */
type ConfirmedTally = { settledCount: number; settledVolume: bigint; deferred: number; paused: number };

async function confirmed(
  ctx: OutcomeContext,
  batchId: number,
  rows: PaymentRow[],
  outcome: ConfirmedOutcome,
  commit: Commit,
  recorded: Recorded,
): Promise<void> {
  const { deps } = ctx;
  const token = rows[0]?.token;
  const outcomes = settlerResults(deps.batchSettler, token, outcome);
  const reads = await readRefusals(deps, rows, outcomes);
  const now = unixSeconds(deps.clock);
  let tally: ConfirmedTally = { settledCount: 0, settledVolume: 0n, deferred: 0, paused: 0 };
  await commit(async (tx) => {
    // A retried commit starts over: what an aborted attempt counted was never committed.
    resetRecorded(recorded);
    tally = await recordConfirmed(deps, tx, { batchId, rows, outcome, outcomes, reads, now }, recorded);
  });
  reportConfirmed(ctx, batchId, rows, token, tally);
}

/** Each item's result per BatchSettler's events in the transaction's logs. */
function settlerResults(
  batchSettler: Address,
  token: string | undefined,
  outcome: ConfirmedOutcome,
): Map<string, ItemResult> {
  const outcomes = new Map<string, ItemResult>();
  const settler = batchSettler.toLowerCase();
  for (const event of readSettlerLogs(outcome.logs)) {
    if (event.address !== settler) continue;
    if (event.eventName === "Deferred") continue;
    // Our transaction settles one token; an event naming another did not come from our call.
    if (event.token !== token) continue;
    const key = `${event.from}:${event.nonce}`;
    if (event.eventName === "Settled") outcomes.set(key, { ok: true });
    if (event.eventName === "SettleFailed") outcomes.set(key, { ok: false, reason: event.reason });
  }
  return outcomes;
}

/**
 * An item refused for a used nonce may have been submitted by someone else first: if that transfer
 * is exactly this payment, the payee was paid and the payment is settled (invariant 5). An item a
 * blacklist refused gets the blacklisted account named. Both are chain reads, made before the commit.
 */
async function readRefusals(
  deps: BatchOutcomeDeps,
  rows: PaymentRow[],
  outcomes: Map<string, ItemResult>,
): Promise<RefusalReads> {
  const elsewhere = new Map<string, { hash: Hash; blockNumber: bigint }>();
  const refusals = new Map<string, TollgateError>();
  for (const row of rows) {
    const result = outcomes.get(`${row.payer}:${row.nonce}`);
    if (row.status !== "submitted" || result === undefined || result.ok) continue;
    const refusal = refusalFromRevert(result.reason);
    if (refusal.code !== "NonceAlreadyUsed") {
      refusals.set(row.nonce, await deps.checks.nameBlacklisted(row, refusal));
      continue;
    }
    const use = await deps.checks.onChainUse(row);
    if (use.kind === "matched") elsewhere.set(row.nonce, use);
  }
  return { elsewhere, refusals };
}

/** The writes of a confirmed batch's commit, item by item in the batch's order, then its close. */
async function recordConfirmed(
  deps: BatchOutcomeDeps,
  tx: Queryable,
  batch: {
    batchId: number;
    rows: PaymentRow[];
    outcome: ConfirmedOutcome;
    outcomes: Map<string, ItemResult>;
    reads: RefusalReads;
    now: number;
  },
  recorded: Recorded,
): Promise<ConfirmedTally> {
  const { batchId, rows, outcome, outcomes, reads, now } = batch;
  const tally: ConfirmedTally = { settledCount: 0, settledVolume: 0n, deferred: 0, paused: 0 };
  const settle: SettleItem[] = [];
  for (const row of rows) {
    if (row.status !== "submitted") continue;
    const result = outcomes.get(`${row.payer}:${row.nonce}`);
    const paidElsewhere = reads.elsewhere.get(row.nonce);
    if (result === undefined) {
      // Deferred by the settler (not attempted, too little gas left): not the item's fault, and
      // not an attempt.
      tally.deferred++;
      recorded.requeued = true;
      await requeuePayment(tx, row, { refundAttempt: true });
    } else if (result.ok || paidElsewhere !== undefined) {
      // A payment settled before by a batch a reorganisation undid (it keeps that settlement's
      // block number; reopenSettledBatch.ts) was counted then.
      if (row.block_number === null) {
        tally.settledCount++;
        tally.settledVolume += row.amount;
      }
      const by = paidElsewhere ?? { hash: outcome.hash, blockNumber: outcome.blockNumber };
      settle.push({ row, settled: { txHash: by.hash, blockNumber: by.blockNumber, nowSeconds: now } });
    } else if (refusalFromRevert(result.reason).code === "TokenPaused") {
      // The token was paused after the batch was built: nothing is wrong with the payment. Held
      // like a deferred item, and sent again once the token is unpaused.
      tally.paused++;
      recorded.requeued = true;
      await requeuePayment(tx, row, { refundAttempt: true });
    } else {
      const refusal = reads.refusals.get(row.nonce) ?? refusalFromRevert(result.reason);
      await markPaymentFailed(deps, tx, row, refusal, outcome.hash);
    }
  }
  await settleAndClose(deps, recorded, tx, settle, {
    id: batchId,
    status: "confirmed",
    txHash: outcome.hash,
    blockNumber: outcome.blockNumber,
  });
  return tally;
}

/** Logs and metrics of a confirmed batch, once its commit is done. */
function reportConfirmed(
  { deps, log }: OutcomeContext,
  batchId: number,
  rows: PaymentRow[],
  token: string | undefined,
  { settledCount, settledVolume, deferred, paused }: ConfirmedTally,
): void {
  if (deferred > 0) log.info({ batch: batchId, deferred }, "settler deferred items; they are requeued");
  if (paused > 0 && token !== undefined) {
    log.warn(
      { batch: batchId, held: paused },
      "the token is paused: its items are held until it is unpaused",
    );
    deps.onTokenPaused?.(token);
  }
  if (settledCount > 0) deps.metrics?.onSettled(settledCount, settledVolume, token ?? "");
  for (const r of rows) deps.metrics?.onLatency((deps.clock.now() - r.created_at.getTime()) / 1000);
}

async function reverted(
  { deps, log }: OutcomeContext,
  batchId: number,
  rows: PaymentRow[],
  txHash: Hash,
  commit: Commit,
  recorded: Recorded,
): Promise<void> {
  const open = rows.filter((r) => r.status === "submitted");
  const cap = Math.max(1, Math.ceil(open.length / 2));
  const verdicts = new Map<number, Recheck>();
  for (const row of open) verdicts.set(row.id, await deps.checks.recheck(row));
  const now = unixSeconds(deps.clock);
  let paused = false;
  await commit(async (tx) => {
    paused = false;
    resetRecorded(recorded);
    const settle: SettleItem[] = [];
    for (const row of open) {
      const verdict = verdicts.get(row.id)!;
      if (verdict.kind === "settled") {
        settle.push({
          row,
          settled: { txHash: verdict.hash, blockNumber: verdict.blockNumber, nowSeconds: now },
        });
      } else if (verdict.kind === "failed" && verdict.error.code === "TokenPaused") {
        // Paused, not refused: back to the queue, no attempt counted, held until the unpause.
        paused = true;
        recorded.requeued = true;
        await requeuePayment(tx, row, { refundAttempt: true });
      } else if (verdict.kind === "failed") {
        await markPaymentFailed(deps, tx, row, verdict.error, txHash);
      } else if ((open.length === 1 && row.attempts >= MAX_ATTEMPTS) || row.attempts >= MAX_TOTAL_ATTEMPTS) {
        await markPaymentFailed(
          deps,
          tx,
          row,
          new TollgateError("ChainUnavailable", "the settlement transaction kept reverting"),
          txHash,
        );
      } else {
        recorded.requeued = true;
        await requeuePayment(tx, row, { cap });
      }
    }
    await settleAndClose(deps, recorded, tx, settle, {
      id: batchId,
      status: "failed",
      txHash,
      blockNumber: null,
    });
  });
  log.warn(
    { batch: batchId, tx: txHash, items: open.length, cap },
    "settlement transaction reverted; items checked again and split",
  );
  const token = rows[0]?.token;
  if (paused && token !== undefined) deps.onTokenPaused?.(token);
}

async function dropped(
  { deps }: OutcomeContext,
  batchId: number,
  rows: PaymentRow[],
  commit: Commit,
  recorded: Recorded,
): Promise<void> {
  const open = rows.filter((r) => r.status === "submitted");
  const uses = new Map<number, Awaited<ReturnType<PaymentChecks["onChainUse"]>>>();
  for (const row of open) uses.set(row.id, await deps.checks.onChainUse(row));
  const now = unixSeconds(deps.clock);
  await commit(async (tx) => {
    resetRecorded(recorded);
    const settle: SettleItem[] = [];
    for (const row of open) {
      const use = uses.get(row.id)!;
      if (use.kind === "matched") {
        settle.push({ row, settled: { txHash: use.hash, blockNumber: use.blockNumber, nowSeconds: now } });
      } else if (use.kind === "other") {
        await markPaymentFailed(
          deps,
          tx,
          row,
          new TollgateError("NonceAlreadyUsed", "this authorization's nonce was already used on chain"),
          null,
        );
      } else {
        recorded.requeued = true;
        await requeuePayment(tx, row);
      }
    }
    await settleAndClose(deps, recorded, tx, settle, {
      id: batchId,
      status: "failed",
      txHash: null,
      blockNumber: null,
    });
  });
}
