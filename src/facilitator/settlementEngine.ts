/**
 * The settlement engine (DESIGN.md §4): takes checked EIP-3009 authorizations, settles them on chain
 * in batches through BatchSettler, and signs a payment proof for each settled Tollgate payment.
 *
 * Invariants, in the order a payment meets them:
 * 1. A payment row (status `pending`) is written before anything is sent. Its EIP-3009 nonce is
 *    UNIQUE, so the same signed payment arriving twice, on one instance or several, is one row.
 * 2. Rows are claimed into a batch (`submitted`) with `FOR UPDATE SKIP LOCKED`, and the batch's
 *    transaction is signed locally and recorded (raw bytes, hash, account nonce) *before* it is
 *    broadcast. After a crash the recorded transaction is looked up or broadcast again; it is never
 *    re-signed into a second transaction with other contents.
 * 3. Outcomes are recorded only from a receipt (or, when the recorded transaction was displaced, from
 *    the token's own `authorizationState`). The token refuses a second use of an authorization nonce,
 *    so no path can pay twice; every path ends with each row `settled` or `failed` or back in the queue.
 * 4. One payer cannot sink a batch. BatchSettler gives each item at most `SETTLER_ITEM_GAS` and defers
 *    (never fails) the items it cannot give that much; a whole batch that reverts anyway (an older
 *    settler, a token that reverts outside the item) is split: every item is checked again on chain and
 *    the good ones go back to the queue capped at half the batch's size, so a poisonous item ends alone.
 * 5. A payment is `settled` only by a transfer that matches it: its own batch's `Settled`, or a
 *    transaction that used its nonce *and* moved exactly the signed (from, to, value) of its token (a
 *    third party may submit a signed authorization before the batch does; the payee was paid, so the
 *    proof is issued). A nonce used for anything else fails the payment.
 */

import type { Logger } from "pino";
import {
  type Address,
  BaseError,
  encodeFunctionData,
  getAbiItem,
  getAddress,
  type Hash,
  type Hex,
  keccak256,
  type PublicClient,
  parseEventLogs,
  type TransactionReceipt,
} from "viem";
import { SETTLER_ITEM_GAS, settleGasLimit } from "../chain/actions/settler/settle.ts";
import { batchSettlerAbi } from "../chain/contracts/artifacts/BatchSettler.ts";
import { tollgateUsdAbi } from "../chain/contracts/artifacts/TollgateUSD.ts";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { type ErrorCode, TollgateError } from "../protocol/errors.ts";
import type { Network } from "../protocol/network.ts";
import type { PaymentProof } from "../protocol/paymentProof.ts";
import type { SignedPayment } from "../protocol/signedPayment.ts";
import { queryOneParsed } from "../store/queryParsed.ts";
import type { Store } from "../store/store.ts";
import { isChainUnreachable, refusalFromRevert, toChainError } from "./chainErrors.ts";
import {
  type CheckablePayment,
  checkSignedPayment,
  type SupportedTokenConfig,
} from "./checkSignedPayment.ts";
import type { GasAccount } from "./gasAccount.ts";
import {
  type BatchRow,
  BatchRowSchema,
  batchPayments,
  findPaymentByNonce,
  insertPayment,
  openBatches,
  type PaymentRow,
  PaymentRowSchema,
  requeueFailedPayment,
} from "./paymentRecords.ts";
import { type ProofKey, signPaymentProof } from "./proofKeys.ts";
import { createWakeablePause } from "./wakeablePause.ts";

export type SettlementClient = Pick<
  PublicClient,
  | "call"
  | "simulateContract"
  | "readContract"
  | "sendRawTransaction"
  | "getTransactionReceipt"
  | "waitForTransactionReceipt"
  | "getLogs"
  | "getBlockNumber"
>;

export type SettlementMetrics = {
  onSettled(count: number, volume: bigint, token: string): void;
  onFailed(code: string): void;
  onBatch(size: number): void;
  onLatency(seconds: number): void;
};

export type SettlementEngineOptions = {
  store: Store;
  client: SettlementClient;
  /** The gas account that signs batch transactions (shared with the facilitator's other workers). */
  gas: GasAccount;
  network: string;
  chainId: number;
  batchSettler: Address;
  tokens: ReadonlyMap<string, SupportedTokenConfig>;
  proofKey: () => ProofKey;
  clock: Clock;
  logger: Logger;
  metrics?: SettlementMetrics | undefined;
  maxBatchSize?: number | undefined;
  /**
   * While a batch is in flight, how long a new payment may wait for others to join its batch before
   * it is sent in a batch of its own (default 200 ms).
   */
  lingerMs?: number | undefined;
  /** Batches in flight at once (pipelined under consecutive account nonces). */
  maxInFlight?: number | undefined;
  confirmations?: number | undefined;
  proofTtlSeconds?: number | undefined;
  /** How long `/authorize` waits for the outcome before answering 503 (the payment carries on). */
  authorizeTimeoutMs?: number | undefined;
  /** How often open work left by a crash or by another instance is looked at. */
  reconcileIntervalMs?: number | undefined;
  /** Test seams for crash tests: called at the named points of a batch's life. */
  faults?: { afterBroadcast?: (batchId: number) => void | Promise<void> } | undefined;
};

export type SettledPayment = { row: PaymentRow; batchSize: number };

export type SettlementEngine = {
  /** Checks, settles and proves a Tollgate payment; idempotent on the authorization nonce. */
  authorize(payment: SignedPayment): Promise<{ proof: PaymentProof; row: PaymentRow; batchSize: number }>;
  /** Settles a standard x402 `exact` authorization (no memo, no proof). Idempotent on the nonce. */
  settleAuthorization(payment: CheckablePayment): Promise<PaymentRow>;
  /** Runs every check short of settling: off-chain checks and a simulation on chain. */
  preflight(payment: CheckablePayment): Promise<Address>;
  getPayment(nonce: string): Promise<PaymentRow | undefined>;
  start(): Promise<void>;
  stop(): Promise<void>;
};

const MIN_REMAINING_SECONDS = 6;
/**
 * Attempts for a payment whose batch transaction reverted while it was alone in it (after the splits
 * that isolate it), before it fails.
 */
const MAX_ATTEMPTS = 3;
/** A bound on attempts whatever the batch size, so no payment cycles for ever. */
const MAX_TOTAL_ATTEMPTS = 16;
/**
 * Gas a simulation may use: the settler's per-item cap plus the transaction's own intrinsic and calldata
 * cost. A payer whose wallet needs more could never settle in a batch, so it is refused up front.
 */
const SIMULATION_GAS = SETTLER_ITEM_GAS + 40_000n;
/**
 * Blocks searched backwards for the transaction that used an authorization's nonce. A payment waits in
 * the queue for seconds; a day of Base blocks is ample and within what RPC providers serve.
 */
const AUTHORIZATION_LOG_LOOKBACK = 50_000n;

/** How an authorization's nonce stands on chain. */
type OnChainUse =
  | { kind: "unused" }
  | { kind: "matched"; hash: Hash; blockNumber: bigint }
  | { kind: "other" };

export function createSettlementEngine(options: SettlementEngineOptions): SettlementEngine {
  const { store, client, gas, network, clock, logger } = options;
  const maxBatchSize = options.maxBatchSize ?? 100;
  const maxInFlight = options.maxInFlight ?? 4;
  const lingerMs = options.lingerMs ?? 200;
  const confirmations = options.confirmations ?? 1;
  const proofTtl = options.proofTtlSeconds ?? 300;
  const authorizeTimeoutMs = options.authorizeTimeoutMs ?? 30_000;
  const reconcileIntervalMs = options.reconcileIntervalMs ?? 1_000;
  const sender = gas.address.toLowerCase();
  const log = logger.child({ component: "settlement" });

  let running = false;
  let stopping: Promise<void> | undefined;
  const sleeper = createWakeablePause();
  let loopDone: Promise<void> | undefined;
  let chainDown = false;
  /** Set by `signal()`; a signal that arrives while the loop is busy is not lost. */
  let dirty = false;
  /** Pending work is being held back to fill the next batch: wake up after `lingerMs`. */
  let held = false;
  const inFlight = new Map<number, Promise<void>>();
  const waiters = new Map<string, Set<() => void>>();

  const checkContext = () => ({
    network,
    tokens: options.tokens,
    nowSeconds: unixSeconds(clock),
    minRemainingSeconds: MIN_REMAINING_SECONDS,
  });

  function notify(nonce: string): void {
    const set = waiters.get(nonce);
    if (set === undefined) return;
    waiters.delete(nonce);
    for (const fn of set) fn();
  }

  function signal(): void {
    dirty = true;
    sleeper.wake();
  }

  async function simulate(payment: CheckablePayment): Promise<void> {
    const a = payment.authorization;
    try {
      await client.simulateContract({
        address: payment.token as Address,
        abi: tollgateUsdAbi,
        functionName: "transferWithAuthorization",
        args: [
          a.from,
          a.to,
          BigInt(a.value),
          BigInt(a.validAfter),
          BigInt(a.validBefore),
          a.nonce,
          payment.signature,
        ],
        account: options.batchSettler,
        // The transfer lands in the next block, so simulate there: an idle devnet's latest block can be
        // older than the authorization's validAfter (EIP-3009: valid strictly after it).
        blockTag: "pending",
        gas: SIMULATION_GAS,
      });
    } catch (error) {
      if (!isChainUnreachable(error) && isOutOfGas(error)) {
        throw new TollgateError(
          "InvalidSignature",
          "the payer's wallet needs more gas to check its signature than a settlement allows",
          { cause: error, details: { gasLimit: SETTLER_ITEM_GAS.toString() } },
        );
      }
      throw toChainError(error);
    }
  }

  function checkableOf(row: PaymentRow): CheckablePayment {
    return {
      network: row.network,
      token: row.token,
      memo: row.memo ?? undefined,
      authorization: {
        from: row.payer,
        to: row.pay_to,
        value: row.amount.toString(),
        validAfter: row.valid_after.toString(),
        validBefore: row.valid_before.toString(),
        nonce: row.nonce,
      },
      signature: row.signature,
    };
  }

  /**
   * Reads how the row's authorization nonce was used: `matched` names the transaction that moved exactly
   * this payment (the token's `AuthorizationUsed` for (payer, nonce) followed, in the same transaction,
   * by its `Transfer` of (payer, payTo, amount)); `other` means the nonce went to something else (another
   * authorization the payer signed with the same nonce, a cancellation) or its log is out of reach.
   */
  async function onChainUse(row: PaymentRow): Promise<OnChainUse> {
    const token = row.token as Address;
    const used = await client.readContract({
      address: token,
      abi: tollgateUsdAbi,
      functionName: "authorizationState",
      args: [row.payer, row.nonce],
    });
    if (!used) return { kind: "unused" };
    const latest = await client.getBlockNumber();
    const logs = await client.getLogs({
      address: token,
      event: getAbiItem({ abi: tollgateUsdAbi, name: "AuthorizationUsed" }),
      args: { authorizer: row.payer, nonce: row.nonce },
      fromBlock: latest > AUTHORIZATION_LOG_LOOKBACK ? latest - AUTHORIZATION_LOG_LOOKBACK : 0n,
      toBlock: latest,
    });
    const used0 = logs[0];
    if (used0 === undefined || used0.transactionHash === null || used0.blockNumber === null) {
      return { kind: "other" };
    }
    const receipt = await client.getTransactionReceipt({ hash: used0.transactionHash });
    const transfer = parseEventLogs({ abi: tollgateUsdAbi, logs: receipt.logs, eventName: "Transfer" }).find(
      (log) => log.address.toLowerCase() === row.token && (log.logIndex ?? 0) > (used0.logIndex ?? 0),
    );
    const matches =
      transfer !== undefined &&
      transfer.args.from.toLowerCase() === row.payer &&
      transfer.args.to.toLowerCase() === row.pay_to &&
      transfer.args.value === row.amount;
    return matches
      ? { kind: "matched", hash: receipt.transactionHash, blockNumber: receipt.blockNumber }
      : { kind: "other" };
  }

  /**
   * Checks a row again before it is retried: its nonce on chain, its window, and a fresh simulation (the
   * payer's balance, signature and wallet may have changed since the first one). Throws only when the
   * chain cannot be reached.
   */
  async function recheck(
    row: PaymentRow,
  ): Promise<
    | { kind: "ok" }
    | { kind: "settled"; hash: Hash; blockNumber: bigint }
    | { kind: "failed"; error: TollgateError }
  > {
    const use = await onChainUse(row);
    if (use.kind === "matched") return { kind: "settled", hash: use.hash, blockNumber: use.blockNumber };
    if (use.kind === "other") {
      return {
        kind: "failed",
        error: new TollgateError("NonceAlreadyUsed", "this authorization's nonce was already used on chain"),
      };
    }
    if (row.valid_before <= BigInt(unixSeconds(clock) + MIN_REMAINING_SECONDS)) {
      return {
        kind: "failed",
        error: new TollgateError(
          "AuthorizationExpired",
          "the authorization expired before it could be settled",
        ),
      };
    }
    try {
      await simulate(checkableOf(row));
      return { kind: "ok" };
    } catch (error) {
      if (error instanceof TollgateError && error.code !== "ChainUnavailable")
        return { kind: "failed", error };
      throw error;
    }
  }

  async function preflight(payment: CheckablePayment): Promise<Address> {
    const payer = await checkSignedPayment(checkContext(), payment);
    await simulate(payment);
    return payer;
  }

  function sameSignedPayment(row: PaymentRow, payment: CheckablePayment): boolean {
    const a = payment.authorization;
    return (
      row.payer === a.from.toLowerCase() &&
      row.pay_to === a.to.toLowerCase() &&
      row.amount === BigInt(a.value) &&
      row.valid_after === BigInt(a.validAfter) &&
      row.valid_before === BigInt(a.validBefore) &&
      row.token === payment.token.toLowerCase() &&
      row.signature === payment.signature.toLowerCase() &&
      (row.memo ?? undefined) === payment.memo
    );
  }

  /**
   * Gets a payment into the queue exactly once, or finds it there. Returns the row to wait on.
   * A failed row is retried only when a fresh preflight passes (the payer may have topped up).
   */
  async function enqueue(payment: CheckablePayment, source: "tollgate" | "x402"): Promise<PaymentRow> {
    const a = payment.authorization;
    await checkSignedPayment(checkContext(), payment);
    const existing = await findPaymentByNonce(store, a.nonce);
    if (existing !== undefined) return resume(existing, payment);
    await simulate(payment);
    const inserted = await insertPayment(store, {
      nonce: a.nonce,
      network,
      token: payment.token,
      payer: a.from,
      payTo: a.to,
      amount: BigInt(a.value),
      memo: payment.memo,
      source,
      validAfter: BigInt(a.validAfter),
      validBefore: BigInt(a.validBefore),
      signature: payment.signature,
    });
    if (inserted !== undefined) {
      signal();
      return inserted;
    }
    // Lost the insert race to an identical (or conflicting) request.
    const winner = await findPaymentByNonce(store, a.nonce);
    if (winner === undefined) throw new TollgateError("Internal", "payment row vanished after a conflict");
    return resume(winner, payment);
  }

  async function resume(row: PaymentRow, payment: CheckablePayment): Promise<PaymentRow> {
    if (!sameSignedPayment(row, payment)) {
      throw new TollgateError("NonceAlreadyUsed", "another payment already used this authorization nonce", {
        details: { nonce: row.nonce },
      });
    }
    if (row.status !== "failed") return row;
    try {
      await simulate(payment);
    } catch (error) {
      // The row was queued once, so its nonce was unused then: if it has since been used for exactly
      // this transfer (by a third party), the payee was paid and the payment is settled.
      if (!(error instanceof TollgateError) || error.code !== "NonceAlreadyUsed") throw error;
      const use = await onChainUse(row);
      if (use.kind !== "matched") throw error;
      await store.transaction((tx) =>
        markSettled(tx, row, use.hash, use.blockNumber, unixSeconds(clock), "failed"),
      );
      return (await findPaymentByNonce(store, row.nonce)) ?? row;
    }
    if (await requeueFailedPayment(store, row.id)) signal();
    return (await findPaymentByNonce(store, row.nonce)) ?? row;
  }

  /** Waits until the row is settled or failed, or the timeout passes (then 503: it carries on). */
  async function waitForOutcome(row: PaymentRow): Promise<PaymentRow> {
    let current = row;
    const deadline = clock.now() + authorizeTimeoutMs;
    while (current.status !== "settled" && current.status !== "failed") {
      const remaining = deadline - clock.now();
      if (remaining <= 0) {
        throw new TollgateError(
          "ChainUnavailable",
          "settlement is taking longer than expected; send the same payment again to get its outcome",
          {
            retryAfter: 5,
            details: { nonce: row.nonce, status: current.status },
          },
        );
      }
      await new Promise<void>((resolve) => {
        let set = waiters.get(row.nonce);
        if (set === undefined) {
          set = new Set();
          waiters.set(row.nonce, set);
        }
        const done = () => {
          clearTimeout(timer);
          set?.delete(done);
          resolve();
        };
        // Another instance may settle it: look at the store now and then even without a signal.
        const timer = setTimeout(done, Math.min(remaining, 250));
        set.add(done);
      });
      current = (await findPaymentByNonce(store, row.nonce)) ?? current;
    }
    if (current.status === "failed") {
      throw new TollgateError(
        (current.failure_code as ErrorCode | null) ?? "InvalidRequest",
        current.failure_message ?? "the payment failed on chain",
        { details: { nonce: current.nonce } },
      );
    }
    return current;
  }

  async function batchSizeOf(row: PaymentRow): Promise<number> {
    if (row.batch_id === null) return 1;
    const batch = await queryOneParsed(
      store,
      BatchRowSchema,
      "SELECT * FROM settlement_batches WHERE id = $1",
      [row.batch_id],
    );
    return batch?.item_count ?? 1;
  }

  // ---- the batch loop ------------------------------------------------------------------------------

  /** Claims pending rows of one token into a new batch. */
  async function claimBatch(): Promise<{ batch: BatchRow; rows: PaymentRow[] } | "held" | undefined> {
    return store.transaction(async (tx) => {
      const head = await tx.query<{ token: string; waiting: string; age_ms: number }>(
        `SELECT token, count(*) OVER (PARTITION BY token) AS waiting,
                (extract(epoch FROM now() - created_at) * 1000)::float8 AS age_ms
         FROM payments WHERE status = 'pending' AND network = $1 ORDER BY id LIMIT 1`,
        [network],
      );
      const first = head[0];
      if (first === undefined) return undefined;
      const token = first.token;
      // Batching rule: with nothing in flight, send at once (lowest latency when idle). While a batch is
      // in flight, arrivals gather into the next one until it is full or its oldest item has lingered
      // `lingerMs`; under load this turns many payments into one transaction.
      if (inFlight.size > 0 && Number(first.waiting) < maxBatchSize && first.age_ms < lingerMs) return "held";
      // Items of a batch that reverted carry a cap (half that batch's size): the batch they join is no
      // larger, so repeated splits isolate the item that makes batches revert.
      const capped = await tx.query<{ cap: number | null }>(
        `SELECT min(batch_cap) AS cap FROM (SELECT batch_cap FROM payments
           WHERE status = 'pending' AND network = $1 AND token = $2 ORDER BY id LIMIT $3) AS head`,
        [network, token, maxBatchSize],
      );
      const limit = Math.min(maxBatchSize, capped[0]?.cap ?? maxBatchSize);
      const batch = await queryOneParsed(
        tx,
        BatchRowSchema,
        `INSERT INTO settlement_batches (network, token, sender) VALUES ($1, $2, $3) RETURNING *`,
        [network, token, sender],
      );
      if (batch === undefined) throw new TollgateError("Internal", "batch insert returned nothing");
      const rows = await tx.query(
        `UPDATE payments SET status = 'submitted', batch_id = $1, attempts = attempts + 1, updated_at = now()
         WHERE id IN (SELECT id FROM payments WHERE status = 'pending' AND network = $2 AND token = $3
                      ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
         RETURNING *`,
        [batch.id, network, token, limit],
      );
      const parsed = rows.map((r) => PaymentRowSchema.parse(r)).sort((x, y) => x.id - y.id);
      if (parsed.length === 0) {
        await tx.query("DELETE FROM settlement_batches WHERE id = $1", [batch.id]);
        return undefined;
      }
      await tx.query("UPDATE settlement_batches SET item_count = $2 WHERE id = $1", [
        batch.id,
        parsed.length,
      ]);
      return { batch: { ...batch, item_count: parsed.length }, rows: parsed };
    });
  }

  function settleCalldata(token: Address, rows: readonly PaymentRow[]): Hex {
    return encodeFunctionData({
      abi: batchSettlerAbi,
      functionName: "settle",
      args: [
        token,
        rows.map((r) => ({
          from: r.payer,
          to: r.pay_to,
          value: r.amount,
          validAfter: r.valid_after,
          validBefore: r.valid_before,
          nonce: r.nonce,
          signature: r.signature,
        })),
      ],
    });
  }

  /** Signs the batch transaction and records it; nothing is broadcast yet. */
  async function signBatch(batch: BatchRow, rows: PaymentRow[]): Promise<{ hash: Hash; raw: Hex }> {
    const nonce = await gas.takeNonce();
    const raw = await gas.sign({
      to: options.batchSettler,
      data: settleCalldata(batch.token as Address, rows),
      gas: settleGasLimit(rows.length),
      nonce,
    });
    const hash = keccak256(raw);
    await store.query(
      `UPDATE settlement_batches SET status = 'submitted', sender_nonce = $2, tx_hash = $3, raw_tx = $4,
         updated_at = now() WHERE id = $1`,
      [batch.id, nonce, hash, raw],
    );
    return { hash, raw };
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

  /** Records a batch's receipt: each item settled, failed or deferred, per the contract's events. */
  async function recordReceipt(batch: BatchRow, receipt: TransactionReceipt): Promise<void> {
    const rows = await batchPayments(store, batch.id);
    if (receipt.status !== "success") return splitReverted(batch, rows, receipt.transactionHash);
    const outcomes = new Map<string, { ok: true } | { ok: false; reason: Hex }>();
    for (const event of parseEventLogs({ abi: batchSettlerAbi, logs: receipt.logs })) {
      if (event.address.toLowerCase() !== options.batchSettler.toLowerCase()) continue;
      if (event.eventName === "Deferred") continue;
      // Our transaction settles one token; an event naming another did not come from our call.
      if (event.args.token.toLowerCase() !== batch.token) continue;
      const key = `${event.args.from.toLowerCase()}:${event.args.nonce.toLowerCase()}`;
      if (event.eventName === "Settled") outcomes.set(key, { ok: true });
      if (event.eventName === "SettleFailed") outcomes.set(key, { ok: false, reason: event.args.reason });
    }
    // An item refused for a used nonce may have been submitted by someone else first: if that transfer
    // is exactly this payment, the payee was paid and the payment is settled (invariant 5).
    const elsewhere = new Map<string, { hash: Hash; blockNumber: bigint }>();
    for (const row of rows) {
      const outcome = outcomes.get(`${row.payer}:${row.nonce}`);
      if (row.status !== "submitted" || outcome === undefined || outcome.ok) continue;
      if (refusalFromRevert(outcome.reason).code !== "NonceAlreadyUsed") continue;
      const use = await onChainUse(row);
      if (use.kind === "matched") elsewhere.set(row.nonce, use);
    }
    const now = unixSeconds(clock);
    let settledCount = 0;
    let settledVolume = 0n;
    let deferred = 0;
    await store.transaction(async (tx) => {
      for (const row of rows) {
        if (row.status !== "submitted") continue;
        const outcome = outcomes.get(`${row.payer}:${row.nonce}`);
        const paidElsewhere = elsewhere.get(row.nonce);
        if (outcome === undefined) {
          // Deferred by the settler (not attempted, too little gas left): not the item's fault, and
          // not an attempt.
          deferred++;
          await tx.query(
            `UPDATE payments SET status = 'pending', batch_id = NULL, attempts = greatest(attempts - 1, 0),
               updated_at = now() WHERE id = $1 AND status = 'submitted'`,
            [row.id],
          );
        } else if (outcome.ok || paidElsewhere !== undefined) {
          settledCount++;
          settledVolume += row.amount;
          if (paidElsewhere === undefined) {
            await markSettled(tx, row, receipt.transactionHash, receipt.blockNumber, now);
          } else {
            await markSettled(tx, row, paidElsewhere.hash, paidElsewhere.blockNumber, now);
          }
        } else {
          await markFailed(tx, row, refusalFromRevert(outcome.reason), receipt.transactionHash);
        }
      }
      await tx.query(
        "UPDATE settlement_batches SET status = 'confirmed', block_number = $2, updated_at = now() WHERE id = $1",
        [batch.id, receipt.blockNumber],
      );
    });
    if (deferred > 0) log.info({ batch: batch.id, deferred }, "settler deferred items; they are requeued");
    if (settledCount > 0) options.metrics?.onSettled(settledCount, settledVolume, batch.token ?? "");
    for (const r of rows) {
      options.metrics?.onLatency((clock.now() - r.created_at.getTime()) / 1000);
      notify(r.nonce);
    }
    if (deferred > 0) signal();
  }

  /**
   * A batch transaction reverted as a whole: nothing moved. Each item is checked again (invariant 4);
   * an item that fails the check fails now, an item already paid by another transaction is settled, and
   * the rest go back to the queue capped at half this batch's size. An item that keeps reverting when it
   * is alone fails after MAX_ATTEMPTS.
   */
  async function splitReverted(batch: BatchRow, rows: PaymentRow[], txHash: Hash): Promise<void> {
    const open = rows.filter((r) => r.status === "submitted");
    const cap = Math.max(1, Math.ceil(open.length / 2));
    const verdicts = new Map<number, Awaited<ReturnType<typeof recheck>>>();
    for (const row of open) verdicts.set(row.id, await recheck(row));
    const now = unixSeconds(clock);
    await store.transaction(async (tx) => {
      for (const row of open) {
        const verdict = verdicts.get(row.id)!;
        if (verdict.kind === "settled") {
          await markSettled(tx, row, verdict.hash, verdict.blockNumber, now);
        } else if (verdict.kind === "failed") {
          await markFailed(tx, row, verdict.error, txHash);
        } else if (
          (open.length === 1 && row.attempts >= MAX_ATTEMPTS) ||
          row.attempts >= MAX_TOTAL_ATTEMPTS
        ) {
          await markFailed(
            tx,
            row,
            new TollgateError("ChainUnavailable", "the settlement transaction kept reverting"),
            txHash,
          );
        } else {
          await tx.query(
            `UPDATE payments SET status = 'pending', batch_id = NULL, batch_cap = $2, updated_at = now()
             WHERE id = $1 AND status = 'submitted'`,
            [row.id, cap],
          );
        }
      }
      await tx.query("UPDATE settlement_batches SET status = 'failed', updated_at = now() WHERE id = $1", [
        batch.id,
      ]);
    });
    log.warn(
      { batch: batch.id, tx: txHash, items: open.length, cap },
      "settlement transaction reverted; items checked again and split",
    );
    for (const r of rows) notify(r.nonce);
    signal();
  }

  async function markFailed(
    tx: Pick<Store, "query">,
    row: PaymentRow,
    refusal: TollgateError,
    txHash: Hash | null,
  ): Promise<void> {
    const updated = await tx.query(
      `UPDATE payments SET status = 'failed', failure_code = $2, failure_message = $3, tx_hash = $4,
         updated_at = now() WHERE id = $1 AND status = 'submitted' RETURNING id`,
      [row.id, refusal.code, refusal.message, txHash],
    );
    if (updated.length === 0) return;
    log.info(
      {
        ...paymentLogFields(row),
        event: "payment.failed",
        code: refusal.code,
        ...(txHash === null ? {} : { transaction: txHash }),
      },
      "payment failed",
    );
    await tx.query("INSERT INTO events (type, data) VALUES ('payment.failed', $1)", [
      eventData(row, {
        code: refusal.code,
        message: refusal.message,
        ...(txHash === null ? {} : { transaction: txHash }),
      }),
    ]);
    options.metrics?.onFailed(refusal.code);
  }

  /** Marks a row settled by `txHash` and signs its proof; a no-op unless the row is in `from`. */
  async function markSettled(
    tx: Pick<Store, "query">,
    row: PaymentRow,
    txHash: Hash,
    blockNumber: bigint,
    now: number,
    from: "submitted" | "failed" = "submitted",
  ): Promise<void> {
    const proof =
      row.memo === null
        ? null
        : signPaymentProof(options.proofKey(), {
            v: "1",
            scheme: "exact",
            network: row.network as Network,
            token: row.token,
            amount: row.amount.toString(),
            payer: row.payer,
            payTo: row.pay_to,
            memo: row.memo,
            tx: txHash,
            iat: now,
            exp: now + proofTtl,
          });
    const updated = await tx.query(
      `UPDATE payments SET status = 'settled', tx_hash = $2, block_number = $3, proof = $4, settled_at = now(),
         failure_code = NULL, failure_message = NULL, batch_cap = NULL, updated_at = now()
       WHERE id = $1 AND status = $5 RETURNING id`,
      [row.id, txHash, blockNumber, proof, from],
    );
    if (updated.length === 0) return;
    log.info(
      {
        ...paymentLogFields(row),
        event: "payment.settled",
        transaction: txHash,
        blockNumber: blockNumber.toString(),
      },
      "payment settled",
    );
    await tx.query("INSERT INTO events (type, data) VALUES ('payment.settled', $1)", [
      eventData(row, { transaction: txHash, blockNumber: blockNumber.toString() }),
    ]);
  }

  /**
   * Resolves a batch whose recorded transaction never confirmed and can no longer (its account nonce
   * was taken by another transaction): each item's fate is read from the token itself.
   */
  async function resolveDisplaced(batch: BatchRow): Promise<void> {
    const rows = await batchPayments(store, batch.id);
    for (const row of rows) {
      if (row.status !== "submitted") continue;
      const use = await onChainUse(row);
      if (use.kind === "matched") {
        await store.transaction((tx) => markSettled(tx, row, use.hash, use.blockNumber, unixSeconds(clock)));
      } else if (use.kind === "other") {
        await store.transaction((tx) =>
          markFailed(
            tx,
            row,
            new TollgateError("NonceAlreadyUsed", "this authorization's nonce was already used on chain"),
            null,
          ),
        );
      } else {
        await store.query(
          "UPDATE payments SET status = 'pending', batch_id = NULL, updated_at = now() WHERE id = $1 AND status = 'submitted'",
          [row.id],
        );
      }
      notify(row.nonce);
    }
    await store.query("UPDATE settlement_batches SET status = 'failed', updated_at = now() WHERE id = $1", [
      batch.id,
    ]);
    signal();
  }

  /** Drives one signed batch to its recorded outcome. */
  async function driveBatch(batch: BatchRow, hash: Hash, raw: Hex, fresh: boolean): Promise<void> {
    if (!fresh) {
      const receipt = await client.getTransactionReceipt({ hash }).catch((error: unknown) => {
        if (isChainUnreachable(error)) throw error;
        return undefined;
      });
      if (receipt !== undefined) return recordReceipt(batch, receipt);
    }
    const sent = await broadcast(raw);
    if (sent === "nonce-used") {
      const receipt = await client.getTransactionReceipt({ hash }).catch(() => undefined);
      if (receipt !== undefined) return recordReceipt(batch, receipt);
      gas.resync();
      return resolveDisplaced(batch);
    }
    options.metrics?.onBatch(batch.item_count);
    await options.faults?.afterBroadcast?.(batch.id);
    const receipt = await client.waitForTransactionReceipt({ hash, confirmations, timeout: 120_000 });
    await recordReceipt(batch, receipt);
  }

  function track(batchId: number, work: () => Promise<void>): void {
    const promise = work()
      .then(() => {
        chainDown = false;
      })
      .catch((error: unknown) => {
        if (isChainUnreachable(error)) {
          if (!chainDown) log.warn({ batch: batchId }, "chain unreachable; the batch will be retried");
          chainDown = true;
        } else {
          log.error({ batch: batchId, err: error }, "batch failed; it will be reconciled");
        }
      })
      .finally(() => {
        inFlight.delete(batchId);
        signal();
      });
    inFlight.set(batchId, promise);
  }

  /** Picks up batches that are open in the store but not being driven here (after a crash). */
  async function reconcile(): Promise<void> {
    const open = await openBatches(store, network, sender);
    for (const batch of open) {
      if (inFlight.has(batch.id)) continue;
      if (batch.raw_tx === null || batch.tx_hash === null) {
        // Claimed but never signed: nothing can have been broadcast. Release its items.
        await store.transaction(async (tx) => {
          await tx.query(
            "UPDATE payments SET status = 'pending', batch_id = NULL, updated_at = now() WHERE batch_id = $1 AND status = 'submitted'",
            [batch.id],
          );
          await tx.query(
            "UPDATE settlement_batches SET status = 'failed', updated_at = now() WHERE id = $1",
            [batch.id],
          );
        });
        signal();
        continue;
      }
      const hash = batch.tx_hash;
      const raw = batch.raw_tx as Hex;
      track(batch.id, () => driveBatch(batch, hash, raw, false));
    }
  }

  async function tick(): Promise<void> {
    if (chainDown) {
      // Nothing new is signed while the chain is away: open batches are retried first, in nonce order.
      if (inFlight.size === 0) await reconcile();
      return;
    }
    while (running && inFlight.size < maxInFlight) {
      const claimed = await claimBatch();
      if (claimed === undefined) return;
      if (claimed === "held") {
        held = true;
        return;
      }
      const { batch, rows } = claimed;
      let signed: { hash: Hash; raw: Hex };
      try {
        signed = await signBatch(batch, rows);
      } catch (error) {
        // Fees or nonce could not be read: the batch stays unsigned and is released by reconcile.
        if (isChainUnreachable(error)) chainDown = true;
        else log.error({ err: error, batch: batch.id }, "could not sign a batch");
        await reconcile();
        return;
      }
      track(batch.id, () => driveBatch({ ...batch, status: "submitted" }, signed.hash, signed.raw, true));
    }
  }

  async function loop(): Promise<void> {
    let lastReconcile = clock.now();
    while (running) {
      dirty = false;
      held = false;
      try {
        await tick();
        if (clock.now() - lastReconcile >= reconcileIntervalMs) {
          lastReconcile = clock.now();
          await reconcile();
        }
      } catch (error) {
        if (isChainUnreachable(error)) chainDown = true;
        else log.error({ err: error }, "settlement loop error");
      }
      if (!running) break;
      if (dirty && !held && !chainDown) continue;
      await sleeper.pause(
        chainDown ? reconcileIntervalMs : held ? lingerMs : Math.min(reconcileIntervalMs, 200),
      );
    }
  }

  async function settle(payment: CheckablePayment, source: "tollgate" | "x402"): Promise<PaymentRow> {
    if (!running)
      throw new TollgateError("ChainUnavailable", "the settlement engine is not running", { retryAfter: 5 });
    let row: PaymentRow;
    try {
      row = await enqueue(payment, source);
    } catch (error) {
      // Refused before any row exists (checks, simulation): one line, as for settled and failed rows.
      if (error instanceof TollgateError && error.code !== "Internal") {
        const a = payment.authorization;
        log.info(
          {
            event: "payment.refused",
            source,
            code: error.code,
            ...(typeof error.details?.reason === "string" ? { reason: error.details.reason } : {}),
            payer: getAddress(a.from),
            payTo: getAddress(a.to),
            amount: a.value,
            network,
            token: getAddress(payment.token),
          },
          "payment refused",
        );
      }
      throw error;
    }
    if (row.status === "settled") return row;
    return waitForOutcome(row);
  }

  return {
    preflight,
    async authorize(payment) {
      const row = await settle(payment, "tollgate");
      if (row.proof === null) throw new TollgateError("Internal", "a settled Tollgate payment has no proof");
      return { proof: row.proof, row, batchSize: await batchSizeOf(row) };
    },
    settleAuthorization: (payment) => settle(payment, "x402"),
    getPayment: (nonce) => findPaymentByNonce(store, nonce),
    async start() {
      if (running) return;
      running = true;
      await reconcile().catch((error: unknown) => {
        if (isChainUnreachable(error)) chainDown = true;
        else throw error;
      });
      loopDone = loop();
    },
    stop() {
      stopping ??= (async () => {
        running = false;
        sleeper.wake();
        await loopDone;
        await Promise.allSettled([...inFlight.values()]);
      })();
      return stopping;
    },
  };
}

/** True when a call or simulation ran out of gas (a wallet that burns what it is given, say). */
function isOutOfGas(error: unknown): boolean {
  if (!(error instanceof BaseError)) return false;
  let text = "";
  error.walk((e) => {
    text += ` ${(e as Error).message} ${String((e as { details?: unknown }).details ?? "")}`;
    return false;
  });
  return /out of gas|OutOfGas|gas required exceeds|gas uint64 overflow/i.test(text);
}

/**
 * What a log line says of a payment. Never the memo, the signature or the proof: a memo with the
 * public authorization is enough to have `/authorize` hand the proof out again (createLogger.ts).
 */
function paymentLogFields(row: PaymentRow): Record<string, unknown> {
  return {
    source: row.source,
    // Checksummed, as in refusal lines (the store keeps lower case).
    payer: getAddress(row.payer),
    payTo: getAddress(row.pay_to),
    amount: row.amount.toString(),
    network: row.network,
    token: getAddress(row.token),
  };
}

function eventData(row: PaymentRow, extra: Record<string, unknown>): Record<string, unknown> {
  return {
    nonce: row.nonce,
    network: row.network,
    token: row.token,
    payer: row.payer,
    payTo: row.pay_to,
    amount: row.amount.toString(),
    source: row.source,
    ...(row.memo === null ? {} : { memo: row.memo }),
    ...extra,
  };
}
