/**
 * The persistent budget ledger (docs/budgets.md). A spend goes through three steps:
 * `reserve` (checks every limit and holds the amount) → the payment → `commit` (records what was
 * actually paid) or `release` (frees the hold when the payment did not happen).
 *
 * Concurrency: every read-check-write runs in one store transaction that first takes the agent's row
 * lock (`SELECT … FROM agent_budgets … FOR UPDATE`). Reservations of one agent are therefore
 * serialized, and each sees every reservation and commit that came before it, on PGlite (one
 * connection, transactions in turn) and on PostgreSQL (READ COMMITTED: each statement after the lock
 * sees the committed work of the transactions that held it before). Agents do not block each other.
 *
 * Expiry: a reservation holds budget until `expiresAt`, so a crashed agent frees its holds by itself.
 * Nothing has to sweep: an expired reservation simply stops counting.
 */
import { randomUUID } from "node:crypto";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import {
  type BudgetLedger,
  type BudgetLedgerOptions,
  ChargeRequestSchema,
  DEFAULT_RESERVATION_TTL_SECONDS,
  HoldRequestSchema,
  MAX_RESERVATION_TTL_SECONDS,
  ReserveRequestSchema,
} from "./budgetLedgerTypes.ts";
import { lockAgentBudget, readBudgetLimits, writeBudgetLimits } from "./budgetLimitRecords.ts";
import { type AgentId, AgentIdSchema, BudgetLimitsSchema } from "./budgetLimits.ts";
import { createBudgetReader } from "./budgetReader.ts";
import { createLedgerApproval } from "./ledgerApproval.ts";
import { parseOrThrow } from "./ledgerErrors.ts";
import type { LedgerParts } from "./ledgerParts.ts";
import { createLimitCheck } from "./limitCheck.ts";
import { readPendingPayments } from "./pendingPaymentRecords.ts";
import { ReservationBook } from "./reservationBook.ts";
import { createSaleReservations } from "./saleReservations.ts";
import { SpendRecorder } from "./spendRecorder.ts";
import { endSubscription } from "./spendRecords.ts";
import { StandingHolds } from "./standingHolds.ts";

/** The ledger's types live apart, so the parts below can name them without importing this file. */
export {
  type ApprovalRequest,
  type BudgetApproval,
  type BudgetLedger,
  type BudgetLedgerOptions,
  type ChargeOutcome,
  type ChargeRequest,
  ChargeRequestSchema,
  type HoldRequest,
  HoldRequestSchema,
  type LedgerLogger,
  type PendingPayment,
  type Reservation,
  type ReserveRequest,
  ReserveRequestSchema,
  type SpendOutcome,
} from "./budgetLedgerTypes.ts";

/**
 * Checks the ledger's options once and builds its shared parts (docs/budgets.md): the report reader,
 * the limits check, the approval hook and the sale reservations.
 */
function createLedgerParts(options: BudgetLedgerOptions): LedgerParts & { defaultTtl: number } {
  const { store, clock, approval, logger } = options;
  const defaultTtl = options.reservationTtlSeconds ?? DEFAULT_RESERVATION_TTL_SECONDS;
  if (!Number.isInteger(defaultTtl) || defaultTtl <= 0 || defaultTtl > MAX_RESERVATION_TTL_SECONDS) {
    throw new TollgateError(
      ErrorCode.InvalidRequest,
      "reservationTtlSeconds must be a positive integer (≤ 7 days)",
    );
  }
  if (approval !== undefined && approval.threshold < 0n) {
    throw new TollgateError(ErrorCode.InvalidRequest, "the approval threshold must not be negative");
  }
  const reader = createBudgetReader({ store, clock });
  return {
    store,
    clock,
    logger,
    createId: options.createId ?? randomUUID,
    reader,
    limits: createLimitCheck(logger),
    approval: createLedgerApproval({ store, clock, reader, approval, logger }),
    sales: createSaleReservations(clock),
    defaultTtl,
  };
}

const parseAgent = (agent: string): AgentId => parseOrThrow(AgentIdSchema, agent, "agent name");

/**
 * Opens the budget ledger over a migrated store.
 * @example
 * const ledger = createBudgetLedger({ store, clock: systemClock });
 * await ledger.setLimits("researcher", { total: 10_000_000n, daily: 2_000_000n, perCall: 50_000n });
 * const hold = await ledger.reserve("researcher", { amount: 10_000n, provider: payTo, kind: "one-time" });
 * try {
 *   await payer.pay(option);
 *   await ledger.commit(hold);
 * } finally {
 *   await ledger.release(hold); // no-op after a commit
 * }
 */
export function createBudgetLedger(options: BudgetLedgerOptions): BudgetLedger {
  const parts = createLedgerParts(options);
  const { store, clock, logger, reader, sales } = parts;
  const reservations = new ReservationBook(parts);
  const spends = new SpendRecorder(parts);
  const holds = new StandingHolds(parts);
  return {
    store,
    async setLimits(agentInput, limitsInput) {
      const agent = parseAgent(agentInput);
      const limits = parseOrThrow(BudgetLimitsSchema, limitsInput, "budget limits");
      await store.transaction((tx) => writeBudgetLimits(tx, agent, limits));
      logger?.info({ agent }, "budget: limits set");
      return limits;
    },
    async getLimits(agentInput) {
      const agent = parseAgent(agentInput);
      return store.transaction((tx) => readBudgetLimits(tx, agent, ""));
    },
    async reserve(agentInput, requestInput) {
      const agent = parseAgent(agentInput);
      return reservations.reserve(
        agent,
        parseOrThrow(ReserveRequestSchema, requestInput, "reservation request"),
      );
    },
    commit: (reservation, actualAmount) => spends.commit(reservation, actualAmount),
    release: (reservation) => reservations.release(reservation),
    pend: (reservation, payment) => reservations.pend(reservation, payment),
    async pendingPayments(agentInput) {
      return readPendingPayments(store, parseAgent(agentInput));
    },
    async saleHeld(agentInput, id) {
      return sales.held(store, parseAgent(agentInput), id);
    },
    async endSubscription(agentInput, ref) {
      const agent = parseAgent(agentInput);
      return store.transaction(async (tx) => {
        await lockAgentBudget(tx, agent);
        return endSubscription(tx, agent, ref, new Date(clock.now()));
      });
    },
    async hold(agentInput, requestInput) {
      const agent = parseAgent(agentInput);
      return holds.hold(agent, parseOrThrow(HoldRequestSchema, requestInput, "hold request"));
    },
    async charge(agentInput, requestInput) {
      const agent = parseAgent(agentInput);
      return holds.charge(agent, parseOrThrow(ChargeRequestSchema, requestInput, "charge request"));
    },
    async releaseHold(agentInput, ref) {
      return holds.releaseHold(parseAgent(agentInput), ref);
    },
    async getHold(agentInput, ref) {
      return holds.getHold(parseAgent(agentInput), ref);
    },
    async report(agentInput) {
      return reader.report(parseAgent(agentInput));
    },
  };
}
