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
 * Parts: settlement/paymentChecks.ts (checks against the chain), settlement/paymentIntake.ts (a payment
 * into the queue once) over settlement/paymentQueue.ts (its statements, and the lone payment sent at
 * once), settlement/batchingLoop.ts (the loop) with settlement/loopSignals.ts (what wakes it) and
 * settlement/inFlightBatches.ts (its batches in flight), settlement/batchClaims.ts (batching),
 * settlement/batchOutcome.ts and settlement/paymentOutcomes.ts (recording outcomes),
 * settlement/issuePaymentProof.ts (proofs), settlement/outcomeWaiters.ts (callers waiting),
 * settlement/adoptLegacyBatches.ts (start-up); this file composes them into the entry points.
 */

import type { Logger } from "pino";
import { type Address, getAddress, type PublicClient } from "viem";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentProof } from "../protocol/paymentProof.ts";
import type { SignedPayment } from "../protocol/signedPayment.ts";
import { queryOneParsed } from "../store/queryParsed.ts";
import type { Store } from "../store/store.ts";
import type { CheckablePayment, SupportedTokenConfig } from "./checkSignedPayment.ts";
import type { ContractSigners } from "./contractSigners.ts";
import type { OutboxFaults } from "./outbox/createOutbox.ts";
import type { Outbox } from "./outbox/outboxTypes.ts";
import { BatchRowSchema, findPaymentByNonce, type PaymentRow } from "./paymentRecords.ts";
import type { ProofKey } from "./proofKeys.ts";
import { adoptLegacyBatches } from "./settlement/adoptLegacyBatches.ts";
import { SETTLEMENT_KIND } from "./settlement/batchClaims.ts";
import { type BatchingLoop, createBatchingLoop } from "./settlement/batchingLoop.ts";
import { createBatchOutcomeHandler } from "./settlement/batchOutcome.ts";
import { createInFlightBatches, type InFlightBatches } from "./settlement/inFlightBatches.ts";
import { LoopSignals } from "./settlement/loopSignals.ts";
import { createOutcomeWaiters, type OutcomeWaiters } from "./settlement/outcomeWaiters.ts";
import {
  createPaymentChecks,
  type PaymentCheckClient,
  type PaymentChecks,
} from "./settlement/paymentChecks.ts";
import { enqueuePayment, type PaymentIntakeDeps } from "./settlement/paymentIntake.ts";
import type { PaymentOutcomeDeps } from "./settlement/paymentOutcomes.ts";
import { createPaymentQueue } from "./settlement/paymentQueue.ts";
import { createReopenSettledBatch } from "./settlement/reopenSettledBatch.ts";
import type { TokenPauseWatch } from "./tokenPauseWatch.ts";
import { IDLE_BACKSTOP_MS } from "./wakeablePause.ts";

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

/** The engine's parts (each with its own state), built once from the options. */
type EngineParts = {
  log: Logger;
  checks: PaymentChecks;
  waiters: OutcomeWaiters;
  outcomeDeps: PaymentOutcomeDeps;
  signals: LoopSignals;
  inFlight: InFlightBatches;
  loop: BatchingLoop;
  intake: PaymentIntakeDeps;
};

function createEngineParts(options: SettlementEngineOptions): EngineParts {
  const { store, outbox, network, clock, logger } = options;
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
  const signals = new LoopSignals();
  const inFlight = createInFlightBatches({ store, onBatch: (size) => options.metrics?.onBatch(size) });
  const loop = createBatchingLoop({
    store,
    outbox,
    network,
    batchSettler: options.batchSettler,
    clock,
    log,
    signals,
    inFlight,
    tokenPause: options.tokenPause,
    maxBatchSize: options.maxBatchSize ?? 100,
    lingerMs: options.lingerMs ?? 200,
    maxInFlight: options.maxInFlight ?? 6,
    reconcileIntervalMs: options.reconcileIntervalMs ?? 1_000,
    idlePollMs: options.idlePollMs ?? IDLE_BACKSTOP_MS,
  });
  const queue = createPaymentQueue({
    store,
    outbox,
    network,
    batchSettler: options.batchSettler,
    signals,
    inFlight,
    loop,
  });
  const intake = { store, network, clock, checks, queue, outcomeDeps, signal: () => signals.signal() };
  return { log, checks, waiters, outcomeDeps, signals, inFlight, loop, intake };
}

/**
 * The outbox records each batch's outcome through this handler (batchOutcome.ts); once it commits, the
 * batch leaves the in-flight set, its callers are woken and the loop looks again.
 */
function handleBatchOutcomes(options: SettlementEngineOptions, parts: EngineParts): void {
  const { signals, inFlight, waiters } = parts;
  options.outbox.handle(
    SETTLEMENT_KIND,
    createBatchOutcomeHandler({
      ...parts.outcomeDeps,
      store: options.store,
      batchSettler: options.batchSettler,
      checks: parts.checks,
      clock: options.clock,
      logger: options.logger,
      metrics: options.metrics,
      onTokenPaused: (token) => options.tokenPause?.suspect(token),
      claimedRows: (batchId) => inFlight.takeClaimedRows(batchId),
      afterCommit(batchId, rows, settled, requeued) {
        inFlight.forget(batchId);
        if (requeued) signals.pendingMaybe = true;
        const settledByNonce = new Map(settled.map((r) => [r.nonce, r]));
        for (const r of rows) {
          const row = settledByNonce.get(r.nonce);
          waiters.notify(r.nonce, row === undefined ? undefined : { row, batchSize: rows.length });
        }
        signals.wakeNow();
      },
    }),
  );
}

async function batchSizeOf(store: Store, row: PaymentRow): Promise<number> {
  if (row.batch_id === null) return 1;
  const batch = await queryOneParsed(
    store,
    BatchRowSchema,
    "SELECT * FROM settlement_batches WHERE id = $1",
    [row.batch_id],
  );
  return batch?.item_count ?? 1;
}

/** Refused before any row exists (checks, simulation): one line, as for settled and failed rows. */
function logRefusal(
  log: Logger,
  network: string,
  error: TollgateError,
  payment: CheckablePayment,
  source: "tollgate" | "x402",
): void {
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

/** Queues the payment (or finds it queued) and waits for its outcome. */
async function settle(
  options: SettlementEngineOptions,
  parts: EngineParts,
  payment: CheckablePayment,
  source: "tollgate" | "x402",
): Promise<{ row: PaymentRow; batchSize?: number }> {
  if (!parts.loop.running)
    throw new TollgateError("ChainUnavailable", "the settlement engine is not running", { retryAfter: 5 });
  let row: PaymentRow;
  try {
    row = await enqueuePayment(parts.intake, payment, source);
  } catch (error) {
    // The simulation met the pause: the watch reads `paused()` now rather than at its next round.
    if (error instanceof TollgateError && error.code === "TokenPaused") {
      options.tokenPause?.suspect(payment.token);
    }
    if (error instanceof TollgateError && error.code !== "Internal") {
      logRefusal(parts.log, options.network, error, payment, source);
    }
    throw error;
  }
  if (row.status === "settled") return { row };
  return parts.waiters.waitForOutcome(row, options.authorizeTimeoutMs ?? 30_000).catch((error: unknown) => {
    throw feeHeldTimeout(error, options.outbox.feeHold() !== undefined);
  });
}

export function createSettlementEngine(options: SettlementEngineOptions): SettlementEngine {
  const { store, outbox } = options;
  const parts = createEngineParts(options);
  const { checks, loop, signals } = parts;
  // A batch a reorganisation undid is reopened by the outbox's watch with this hook, and sent again
  // (outbox/confirmedRowWatch.ts; its window and interval are the outbox's reorg options).
  outbox.onReorg(SETTLEMENT_KIND, createReopenSettledBatch(options.logger));
  handleBatchOutcomes(options, parts);
  let stopping: Promise<void> | undefined;
  let unlisten: (() => Promise<void>) | undefined;
  let stopResume: (() => void) | undefined;
  return {
    async preflight(payment) {
      const payer = await checks.checkOffChain(payment);
      await checks.simulate(payment);
      return payer;
    },
    async authorize(payment) {
      const { row, batchSize } = await settle(options, parts, payment, "tollgate");
      if (row.proof === null) throw new TollgateError("Internal", "a settled Tollgate payment has no proof");
      return { proof: row.proof, row, batchSize: batchSize ?? (await batchSizeOf(store, row)) };
    },
    settleAuthorization: async (payment) => (await settle(options, parts, payment, "x402")).row,
    getPayment: (nonce) => findPaymentByNonce(store, nonce),
    async start() {
      if (loop.running) return;
      loop.open();
      await adoptLegacyBatches({ store, outbox, network: options.network, chainId: options.chainId });
      // Payments another instance writes (or a request of this one) wake the loop; see `idlePollMs`.
      unlisten = await store.listen("payments", () => signals.notified());
      stopResume = options.tokenPause?.onResume(() => signals.signal());
      loop.run();
    },
    stop() {
      stopping ??= (async () => {
        await loop.stop();
        await unlisten?.();
        stopResume?.();
        // No outcome is recorded here any more: calls still waiting get a 503 to send again.
        parts.waiters.close();
      })();
      return stopping;
    },
  };
}
