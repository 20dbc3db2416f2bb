/**
 * The settlement engine (docs/facilitator.md, "Settlement: batching and crash safety"): takes checked EIP-3009 authorizations, settles them on chain
 * in batches through BatchSettler, and signs a payment proof for each settled Tollgate payment.
 *
 * Invariants, in the order a payment meets them:
 * 1. A payment row (status `pending`) is written before anything is sent. Its EIP-3009 nonce is
 *    UNIQUE, so the same signed payment arriving twice, on one instance or several, is one row.
 * 2. Rows are claimed into a batch (`submitted`) with `FOR UPDATE SKIP LOCKED`, and the batch's
 *    `settle` call is queued in the transaction outbox in the same store transaction
 *    (settlement/batchClaims.ts). The outbox signs and records it *before* it is broadcast; after a
 *    crash the recorded transaction is looked up or broadcast again, never re-signed into a second
 *    transaction with other contents (outbox/createOutbox.ts).
 * 3. Outcomes are recorded only from a receipt (or, when the recorded transaction was displaced, from
 *    the token's own `authorizationState`), in the outbox's store transaction for the batch's row
 *    (settlement/batchOutcome.ts). The token refuses a second use of an authorization nonce,
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

/*
 * Modules: settlement/paymentChecks.ts (checks against the chain), settlement/batchClaims.ts (batching),
 * settlement/batchOutcome.ts and settlement/paymentOutcomes.ts (recording outcomes),
 * settlement/issuePaymentProof.ts (proofs), settlement/outcomeWaiters.ts (callers waiting); this file
 * holds the entry points and the batching loop.
 */

import type { Logger } from "pino";
import { type Address, getAddress, type Hex, keccak256, type PublicClient, parseTransaction } from "viem";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentProof } from "../protocol/paymentProof.ts";
import type { SignedPayment } from "../protocol/signedPayment.ts";
import { queryOneParsed, queryParsed } from "../store/queryParsed.ts";
import type { Store } from "../store/store.ts";
import type { CheckablePayment, SupportedTokenConfig } from "./checkSignedPayment.ts";
import type { ContractSigners } from "./contractSigners.ts";
import type { OutboxFaults } from "./outbox/createOutbox.ts";
import { insertSignedRow } from "./outbox/outboxRecords.ts";
import type { Outbox } from "./outbox/outboxTypes.ts";
import {
  BatchRowSchema,
  findPaymentByNonce,
  findPaymentsByNonce,
  insertPayments,
  type NewPayment,
  type PaymentRow,
  requeueFailedPayment,
} from "./paymentRecords.ts";
import type { ProofKey } from "./proofKeys.ts";
import { claimBatch, type HeldBatch, insertAndClaim, SETTLEMENT_KIND } from "./settlement/batchClaims.ts";
import { createBatchOutcomeHandler } from "./settlement/batchOutcome.ts";
import { createCoalescer } from "./settlement/coalescer.ts";
import { createOutcomeWaiters } from "./settlement/outcomeWaiters.ts";
import { createPaymentChecks, type PaymentCheckClient } from "./settlement/paymentChecks.ts";
import { markPaymentSettled, type PaymentOutcomeDeps } from "./settlement/paymentOutcomes.ts";
import { createReopenSettledBatch } from "./settlement/reopenSettledBatch.ts";
import type { TokenPauseWatch } from "./tokenPauseWatch.ts";
import { createWakeablePause, IDLE_BACKSTOP_MS } from "./wakeablePause.ts";

/**
 * A payer's wait that ran out while the batch waits for the chain's fee to fall under the maximum fee
 * (outbox/feeHold.ts) says so, with a longer `Retry-After`: the payment is queued, not lost, and the
 * same payment sent again later answers its outcome. Any other error passes unchanged.
 */
function feeHeldTimeout(error: unknown, feeHeld: boolean): unknown {
  if (!feeHeld || !(error instanceof TollgateError) || error.code !== "ChainUnavailable") return error;
  return new TollgateError(
    "ChainUnavailable",
    "settlement waits for the network's fee to fall under the facilitator's maximum fee; the payment is queued: send the same payment again later to get its outcome",
    { retryAfter: 30, details: { ...error.details, reason: "fee_above_maximum" }, cause: error },
  );
}

export type SettlementClient = PaymentCheckClient & Pick<PublicClient, "getBlockNumber" | "getBlock">;

export type SettlementMetrics = {
  onSettled(count: number, volume: bigint, token: string): void;
  onFailed(code: string): void;
  onBatch(size: number): void;
  onLatency(seconds: number): void;
};

export type SettlementEngineOptions = {
  store: Store;
  client: SettlementClient;
  /** The transaction outbox that signs, sends and reconciles batch transactions. */
  outbox: Outbox;
  network: string;
  chainId: number;
  batchSettler: Address;
  tokens: ReadonlyMap<string, SupportedTokenConfig>;
  proofKey: () => ProofKey;
  clock: Clock;
  logger: Logger;
  /**
   * Wallet payers' signatures, checked through the chain (contractSigners.ts). Without it only
   * payments whose signature recovers to `from` (EOAs) pass the off-chain checks.
   */
  contractSigners?: ContractSigners | undefined;
  metrics?: SettlementMetrics | undefined;
  /**
   * Whether the token's issuer paused it (tokenPauseWatch.ts). While it is, its payments stay queued
   * (none is claimed into a batch, so no transaction is sent), and the loop looks again when it is
   * unpaused. A refusal on chain that names the pause is handed to `suspect`.
   */
  tokenPause?: Pick<TokenPauseWatch, "heldTokens" | "suspect" | "onResume"> | undefined;
  maxBatchSize?: number | undefined;
  /**
   * While a batch is in flight, how long a new payment may wait for others to join its batch before
   * it is sent in a batch of its own (default 200 ms).
   */
  lingerMs?: number | undefined;
  /**
   * Batches in flight at once (pipelined under consecutive account nonces; default 6). Six batches of
   * 100 payments from plain accounts use ~28 M gas, about what a 30 M-gas block holds (docs/facilitator.md).
   */
  maxInFlight?: number | undefined;
  /**
   * Settled batches mined within this many blocks of the head are watched for a reorganisation that
   * undoes them, and settled again if one does (outbox/confirmedRowWatch.ts). Read by createFacilitator,
   * which gives it to the outbox (default 64, at least `confirmations`).
   */
  reorgWindowBlocks?: number | undefined;
  /** How often the confirmed rows of that window are compared with the chain (the outbox's; default 2 000 ms). */
  reorgCheckIntervalMs?: number | undefined;
  /** Accepted for compatibility; confirmations are the outbox's (createFacilitator's `confirmations`). */
  confirmations?: number | undefined;
  proofTtlSeconds?: number | undefined;
  /** How long `/authorize` waits for the outcome before answering 503 (the payment carries on). */
  authorizeTimeoutMs?: number | undefined;
  /** While batches are in flight, how often their outcomes recorded by another instance are looked at. */
  reconcileIntervalMs?: number | undefined;
  /**
   * With nothing in flight, how long the loop sleeps before it looks for payments anyway (default
   * 30 s): a new payment wakes it at once (in process, and through the store's `payments`
   * notification from other instances); this read finds what a lost notification or a crashed
   * instance left.
   */
  idlePollMs?: number | undefined;
  /**
   * Test seams for crash tests: called at the named points of a batch's life (applied to the outbox's
   * rows of kind `settlement` by createFacilitator).
   */
  faults?:
    | {
        afterRecord?: ((batchId: number) => void | Promise<void>) | undefined;
        afterBroadcast?: ((batchId: number) => void | Promise<void>) | undefined;
      }
    | undefined;
};

export type SettledPayment = { row: PaymentRow; batchSize: number };

export type SettlementEngine = {
  /** Checks, settles and proves a Tollgate payment; idempotent on the authorization nonce. */
  authorize(payment: SignedPayment): Promise<{ proof: PaymentProof; row: PaymentRow; batchSize: number }>;
  /** Settles a standard x402 `exact` authorization (no memo, no proof). Idempotent on the nonce. */
  settleAuthorization(payment: CheckablePayment): Promise<PaymentRow>;
  /**
   * Runs every check short of settling: off-chain checks and a simulation on chain. `forSettle`: the
   * check of x402's settle, whose verify admitted the payment before the gate served it (admission then
   * takes the network fee of the last minutes: admitPayments.ts).
   */
  preflight(payment: CheckablePayment, options?: { forSettle?: boolean }): Promise<Address>;
  getPayment(nonce: string): Promise<PaymentRow | undefined>;
  start(): Promise<void>;
  stop(): Promise<void>;
};

/** The settlement engine's faults as the outbox's, for rows of kind `settlement`. */
export function settlementFaults(faults: SettlementEngineOptions["faults"]): OutboxFaults | undefined {
  if (faults === undefined) return undefined;
  const batchOf = (row: { kind: string; owner: string }) =>
    row.kind === SETTLEMENT_KIND ? Number(row.owner) : undefined;
  return {
    afterSign: async (row) => {
      const batch = batchOf(row);
      if (batch !== undefined) await faults.afterRecord?.(batch);
    },
    afterBroadcast: async (row) => {
      const batch = batchOf(row);
      if (batch !== undefined) await faults.afterBroadcast?.(batch);
    },
  };
}

export function createSettlementEngine(options: SettlementEngineOptions): SettlementEngine {
  const { store, outbox, network, clock, logger } = options;
  const maxBatchSize = options.maxBatchSize ?? 100;
  const maxInFlight = options.maxInFlight ?? 6;
  const lingerMs = options.lingerMs ?? 200;
  const authorizeTimeoutMs = options.authorizeTimeoutMs ?? 30_000;
  const reconcileIntervalMs = options.reconcileIntervalMs ?? 1_000;
  const idlePollMs = options.idlePollMs ?? IDLE_BACKSTOP_MS;
  const log = logger.child({ component: "settlement" });
  const checks = createPaymentChecks({
    client: options.client,
    network,
    tokens: options.tokens,
    batchSettler: options.batchSettler,
    clock,
    contractSigners: options.contractSigners,
  });
  const waiters = createOutcomeWaiters({ store, clock, logger: log });
  const outcomeDeps: PaymentOutcomeDeps = {
    proofKey: options.proofKey,
    proofTtlSeconds: options.proofTtlSeconds ?? 300,
    logger: log,
    onFailed: (code) => options.metrics?.onFailed(code),
  };

  // A batch a reorganisation undid is reopened by the outbox's watch with this hook, and sent again
  // (outbox/confirmedRowWatch.ts; its window and interval are the outbox's reorg options).
  outbox.onReorg(SETTLEMENT_KIND, createReopenSettledBatch(logger));

  let running = false;
  let stopping: Promise<void> | undefined;
  let loopDone: Promise<void> | undefined;
  let unlisten: (() => Promise<void>) | undefined;
  let stopResume: (() => void) | undefined;
  const sleeper = createWakeablePause();
  /** Set by `signal()`; a signal that arrives while the loop is busy is not lost. */
  let dirty = false;
  /** Signals since the loop's round began (new payments, and store notifications that may be ones). */
  let arrivals = 0;
  /**
   * While payments are held to fill the next batch: how many more may arrive before it is full. Until
   * then an arrival does not wake the loop (it would only find the batch still held); the linger
   * deadline, a full batch, or a batch's outcome does.
   */
  let holdRoom: number | undefined;
  /** Set by `wakeNow()`: an outcome during the round, so a hold decided in it may be stale. */
  let outcomeSeen = false;
  /** A hold just ended by its deadline or a full batch: the next claim takes the head at once. */
  let holdEnded = false;
  /** `signals` when the loop's last round began (arrivals since then make a claim due when idle). */
  let signalsSeen = 0;
  /** Batches this engine queued whose outcome is not recorded yet (the batching rule reads its size). */
  const inFlight = new Set<number>();
  /** The rows of each batch in flight as its claim wrote them, for its outcome (batchOutcome.ts). */
  const claimedRows = new Map<number, PaymentRow[]>();
  /**
   * Whether the queue may hold payments no read of this loop has seen. Cleared when a read finds the
   * queue empty (or a claim takes all of it) and nothing was signalled since that read began; set by
   * every signal, a requeue, and every pause that ends by its timer (the backstop).
   */
  let pendingMaybe = true;
  /** Counts signals, so a read can tell whether one came while it ran. */
  let signals = 0;
  /**
   * Insert statements this engine is running or ran whose store notification has not come back (the
   * trigger notifies once per statement, whatever it inserted). Each inserted payment signals the loop
   * itself; the statement's notification (heard by this process too) is then not a second reason to
   * read the queue. A notification beyond these is another instance's payment.
   */
  let ownInserts = 0;
  /** A claim of the loop is running (`tick`). */
  let claiming = false;
  /** A lone payment is being inserted and claimed at once (`insertRow`); one at a time. */
  let lone = false;
  /**
   * The queue's two statements per incoming payment, shared by the payments checked at the same time
   * (settlement/coalescer.ts): its nonce looked up, and its row inserted. A lone payment runs each at
   * once; a burst costs one lookup and one insert per round instead of one of each per payment.
   */
  const lookUpPayment = createCoalescer<string, PaymentRow | undefined>(async (nonces) => {
    if (nonces.length === 1) return [await findPaymentByNonce(store, nonces[0]!)];
    const rows = await findPaymentsByNonce(store, nonces);
    const byNonce = new Map<string, PaymentRow>(rows.map((row) => [row.nonce, row]));
    return nonces.map((nonce) => byNonce.get(nonce.toLowerCase()));
  });
  const insertPaymentRow = createCoalescer<NewPayment, PaymentRow | undefined>(async (payments) => {
    // One payment per nonce in the statement (the first); a second one naming it lost to the first,
    // as it would to a row already there, and looks up what holds the nonce. So every row the
    // statement returns is exactly the payment it is handed to.
    const first = new Map<string, NewPayment>();
    for (const p of payments) if (!first.has(p.nonce.toLowerCase())) first.set(p.nonce.toLowerCase(), p);
    // Counted before the statement: its notification may be heard before the statement resolves.
    ownInserts++;
    let rows: PaymentRow[];
    try {
      rows = await insertPayments(store, [...first.values()]);
    } catch (error) {
      // Not committed, so no notification.
      ownInserts = Math.max(0, ownInserts - 1);
      throw error;
    }
    const inserted = new Map<string, PaymentRow>(rows.map((row) => [row.nonce, row]));
    return payments.map((p) =>
      first.get(p.nonce.toLowerCase()) === p ? inserted.get(p.nonce.toLowerCase()) : undefined,
    );
  });
  /**
   * A payment that arrives with nothing in flight, no claim running and no other lone payment on its
   * way is sent at once, alone, by the batching rule: its row goes in already claimed into a batch of
   * its own, signed, in one transaction (batchClaims.ts `insertAndClaim`). Any other arrival is queued
   * for the loop. `undefined` when its nonce is taken.
   */
  async function insertRow(payment: NewPayment): Promise<PaymentRow | undefined> {
    if (!running || lone || claiming || inFlight.size > 0) {
      const row = await insertPaymentRow(payment);
      if (row !== undefined) signal();
      return row;
    }
    lone = true;
    // Counted before the statement, as for a queued insert; nothing is notified when it rolls back.
    ownInserts++;
    try {
      const claimed = await insertAndClaim(
        { store, outbox, network, batchSettler: options.batchSettler },
        payment,
      );
      if (claimed === undefined) {
        ownInserts = Math.max(0, ownInserts - 1);
        return undefined;
      }
      inFlight.add(claimed.batch.id);
      claimedRows.set(claimed.batch.id, claimed.rows);
      options.metrics?.onBatch(claimed.rows.length);
      return claimed.rows[0];
    } catch (error) {
      ownInserts = Math.max(0, ownInserts - 1);
      throw error;
    } finally {
      lone = false;
    }
  }

  /** New work may be waiting (a payment was queued here or elsewhere). */
  function signal(): void {
    dirty = true;
    arrivals++;
    signals++;
    pendingMaybe = true;
    if (holdRoom !== undefined && --holdRoom > 0) return;
    sleeper.wake();
  }

  /** The store's `payments` notification: a payment was inserted here or by another instance. */
  function notified(): void {
    if (ownInserts > 0) {
      ownInserts--;
      return;
    }
    signal();
  }

  /** Look now, held or not: a batch's outcome changed what is in flight. */
  function wakeNow(): void {
    dirty = true;
    outcomeSeen = true;
    holdRoom = undefined;
    sleeper.wake();
  }

  outbox.handle(
    SETTLEMENT_KIND,
    createBatchOutcomeHandler({
      ...outcomeDeps,
      store,
      batchSettler: options.batchSettler,
      checks,
      clock,
      logger,
      metrics: options.metrics,
      onTokenPaused: (token) => options.tokenPause?.suspect(token),
      claimedRows(batchId) {
        const rows = claimedRows.get(batchId);
        claimedRows.delete(batchId);
        return rows;
      },
      afterCommit(batchId, rows, settled, requeued) {
        inFlight.delete(batchId);
        claimedRows.delete(batchId);
        if (requeued) pendingMaybe = true;
        const settledByNonce = new Map(settled.map((r) => [r.nonce, r]));
        for (const r of rows) {
          const row = settledByNonce.get(r.nonce);
          waiters.notify(r.nonce, row === undefined ? undefined : { row, batchSize: rows.length });
        }
        wakeNow();
      },
    }),
  );

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
    await checks.checkOffChain(payment);
    // No read of the store first: nearly every payment is new, and one already there is found when
    // its insert meets the nonce (below) or when the chain refuses it here.
    try {
      await checks.simulate(payment);
    } catch (error) {
      // The row answers, not the chain: a payment queued before (on this instance or another one) may
      // have been settled since (nonce used), its payer's balance moved after it was queued, or the node
      // be unreachable; the same signed payment then waits for that row's outcome (its proof), and a
      // different one is refused by `resume`. A row is always written before its nonce is sent, so no
      // row means someone else used the nonce, and the chain's refusal stands.
      if (!(error instanceof TollgateError)) throw error;
      const queued = await lookUpPayment(a.nonce);
      if (queued === undefined) throw error;
      return resume(queued, payment);
    }
    const inserted = await insertRow({
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
    if (inserted !== undefined) return inserted;
    // Lost the insert race to an identical (or conflicting) request.
    const winner = await lookUpPayment(a.nonce);
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
      await checks.simulate(payment);
    } catch (error) {
      // The row was queued once, so its nonce was unused then: if it has since been used for exactly
      // this transfer (by a third party), the payee was paid and the payment is settled.
      if (!(error instanceof TollgateError) || error.code !== "NonceAlreadyUsed") throw error;
      const use = await checks.onChainUse(row);
      if (use.kind !== "matched") throw error;
      await store.transaction((tx) =>
        markPaymentSettled(
          outcomeDeps,
          tx,
          row,
          { txHash: use.hash, blockNumber: use.blockNumber, nowSeconds: unixSeconds(clock) },
          "failed",
        ),
      );
      return (await findPaymentByNonce(store, row.nonce)) ?? row;
    }
    if (await requeueFailedPayment(store, row.id)) signal();
    return (await findPaymentByNonce(store, row.nonce)) ?? row;
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

  // ---- the batching loop -----------------------------------------------------------------------------

  /** Claims batches while fewer than `maxInFlight` are in flight; says so when work is held to fill one. */
  async function tick(): Promise<HeldBatch | undefined> {
    // A claim is due without a look at the queue's head when a hold just ended, or when nothing is in
    // flight and payments were queued since the last round (not on the start-up or backstop round,
    // which may well find nothing).
    let claimAtOnce = holdEnded || (inFlight.size === 0 && signals !== signalsSeen);
    holdEnded = false;
    signalsSeen = signals;
    // Payments in a paused token wait in the queue; its unpause signals the loop (`start`).
    const heldTokens = options.tokenPause?.heldTokens() ?? [];
    while (running && inFlight.size < maxInFlight && pendingMaybe) {
      const before = signals;
      claiming = true;
      const claimed = await claimBatch(
        { store, outbox, network, batchSettler: options.batchSettler },
        { maxBatchSize, lingerMs, inFlight: inFlight.size, claimAtOnce, heldTokens },
      ).finally(() => {
        claiming = false;
      });
      if (claimed === undefined) {
        if (signals === before) pendingMaybe = false;
        return undefined;
      }
      if ("kind" in claimed) return claimed;
      claimAtOnce = false;
      inFlight.add(claimed.batch.id);
      claimedRows.set(claimed.batch.id, claimed.rows);
      options.metrics?.onBatch(claimed.rows.length);
      // Nothing else was pending: a payment queued since then signals, so the loop looks again anyway.
      if (claimed.drained) {
        if (signals === before) pendingMaybe = false;
        return undefined;
      }
    }
    return undefined;
  }

  /** Forgets in-flight batches whose outcome another instance (or a reconcile) recorded. */
  async function pruneInFlight(): Promise<void> {
    if (inFlight.size === 0) return;
    const open = await store.query<{ id: string }>(
      "SELECT id FROM settlement_batches WHERE id = ANY($1::bigint[]) AND status IN ('pending', 'submitted')",
      [[...inFlight].map(String)],
    );
    const still = new Set(open.map((r) => Number(r.id)));
    for (const id of inFlight) {
      if (still.has(id)) continue;
      inFlight.delete(id);
      claimedRows.delete(id);
    }
  }

  async function loop(): Promise<void> {
    let lastPrune = clock.now();
    while (running) {
      dirty = false;
      arrivals = 0;
      outcomeSeen = false;
      let held: HeldBatch | undefined;
      try {
        held = await tick();
        if (clock.now() - lastPrune >= reconcileIntervalMs) {
          lastPrune = clock.now();
          await pruneInFlight();
        }
      } catch (error) {
        log.error({ err: error }, "settlement loop error");
      }
      if (!running) break;
      if (held === undefined) {
        if (dirty) continue;
        const woken = await sleeper.pause(
          inFlight.size > 0 ? Math.min(reconcileIntervalMs, 200) : idlePollMs,
        );
        // The backstop: a read for what no signal announced (a lost notification, a dead instance's rows).
        if (!woken) {
          pendingMaybe = true;
          ownInserts = 0;
        }
        continue;
      }
      // Held: wait for the oldest payment's linger to end, a full batch, or an outcome (wakeNow).
      const room = maxBatchSize - held.waiting - arrivals;
      if (room <= 0 || outcomeSeen) continue;
      holdRoom = room;
      await sleeper.pause(Math.max(1, Math.ceil(lingerMs - held.ageMs)));
      holdRoom = undefined;
      // Ended by its deadline or by a full batch, not by an outcome: the next claim need not look first.
      holdEnded = !outcomeSeen;
    }
  }

  /**
   * Batches recorded by an older version (signed into `settlement_batches` itself, before the outbox):
   * their transaction is adopted by the outbox as it was signed; unsigned ones release their payments.
   */
  async function adoptLegacyBatches(): Promise<void> {
    const legacy = await queryParsed(
      store,
      BatchRowSchema,
      `SELECT * FROM settlement_batches WHERE status IN ('pending', 'submitted') AND network = $1 AND outbox_id IS NULL`,
      [network],
    );
    for (const batch of legacy) {
      await store.transaction(async (tx) => {
        if (
          batch.raw_tx === null ||
          batch.sender_nonce === null ||
          batch.sender !== outbox.sender.toLowerCase()
        ) {
          if (batch.raw_tx !== null) return; // another gas key's batch: its own facilitator adopts it
          await tx.query(
            "UPDATE payments SET status = 'pending', batch_id = NULL, updated_at = now() WHERE batch_id = $1 AND status = 'submitted'",
            [batch.id],
          );
          await tx.query(
            "UPDATE settlement_batches SET status = 'failed', updated_at = now() WHERE id = $1",
            [batch.id],
          );
          return;
        }
        const raw = batch.raw_tx as Hex;
        const parsed = parseTransaction(raw);
        const id = await insertSignedRow(
          tx,
          { chainId: options.chainId, sender: outbox.sender },
          {
            kind: SETTLEMENT_KIND,
            owner: String(batch.id),
            to: parsed.to as Address,
            data: parsed.data ?? "0x",
            gas: parsed.gas ?? 0n,
            nonce: batch.sender_nonce,
            hash: keccak256(raw),
            raw,
            fromBlock: null,
          },
        );
        await tx.query("UPDATE settlement_batches SET outbox_id = $2 WHERE id = $1", [batch.id, id]);
      });
    }
  }

  async function settle(
    payment: CheckablePayment,
    source: "tollgate" | "x402",
  ): Promise<{ row: PaymentRow; batchSize?: number }> {
    if (!running)
      throw new TollgateError("ChainUnavailable", "the settlement engine is not running", { retryAfter: 5 });
    let row: PaymentRow;
    try {
      row = await enqueue(payment, source);
    } catch (error) {
      // The simulation met the pause: the watch reads `paused()` now rather than at its next round.
      if (error instanceof TollgateError && error.code === "TokenPaused") {
        options.tokenPause?.suspect(payment.token);
      }
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
    if (row.status === "settled") return { row };
    return waiters.waitForOutcome(row, authorizeTimeoutMs).catch((error: unknown) => {
      throw feeHeldTimeout(error, options.outbox.feeHold() !== undefined);
    });
  }

  return {
    async preflight(payment) {
      const payer = await checks.checkOffChain(payment);
      await checks.simulate(payment);
      return payer;
    },
    async authorize(payment) {
      const { row, batchSize } = await settle(payment, "tollgate");
      if (row.proof === null) throw new TollgateError("Internal", "a settled Tollgate payment has no proof");
      return { proof: row.proof, row, batchSize: batchSize ?? (await batchSizeOf(row)) };
    },
    settleAuthorization: async (payment) => (await settle(payment, "x402")).row,
    getPayment: (nonce) => findPaymentByNonce(store, nonce),
    async start() {
      if (running) return;
      running = true;
      await adoptLegacyBatches();
      // Payments another instance writes (or a request of this one) wake the loop; see `idlePollMs`.
      unlisten = await store.listen("payments", notified);
      stopResume = options.tokenPause?.onResume(() => signal());
      loopDone = loop();
    },
    stop() {
      stopping ??= (async () => {
        running = false;
        sleeper.wake();
        await loopDone;
        await unlisten?.();
        stopResume?.();
        // No outcome is recorded here any more: calls still waiting get a 503 to send again.
        waiters.close();
      })();
      return stopping;
    },
  };
}
