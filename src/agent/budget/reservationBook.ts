/**
 * The reservation book: `reserve` holds an amount until it expires, `release` frees it, `pend` keeps a
 * payment whose outcome is unknown held past the expiry (docs/budgets.md). Each runs in one store
 * transaction that takes the agent's row lock before it reads, so an agent's holds are serialized.
 */
import type { Address } from "viem";
import { z } from "zod";
import { AddressSchema } from "../../protocol/address.ts";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import type { Queryable } from "../../store/store.ts";
import type {
  ApprovalRequest,
  BudgetLedger,
  Reservation,
  ReserveRequestSchema,
  SpendOutcome,
} from "./budgetLedgerTypes.ts";
import { MAX_RESERVATION_TTL_SECONDS } from "./budgetLedgerTypes.ts";
import type { AgentId } from "./budgetLimits.ts";
import { parseOrThrow } from "./ledgerErrors.ts";
import type { LedgerParts } from "./ledgerParts.ts";
import { deletePendingPayment, insertPendingPayment } from "./pendingPaymentRecords.ts";
import { extendReservation, insertReservation, lockSpend, markReleased, outcomeOf } from "./spendRecords.ts";

/** How long a pending payment's reservation holds at most (the longest reservation). */
const PENDING_HOLD_MS = MAX_RESERVATION_TTL_SECONDS * 1000;
const NonceSchema = z.string().regex(/^0x[0-9a-fA-F]{64}$/);

type ReserveRequest = z.output<typeof ReserveRequestSchema>;
type PendedPayment = Parameters<BudgetLedger["pend"]>[1];

/** An agent's reservations, kept in the ledger's store; `createBudgetLedger` builds one. */
export class ReservationBook {
  readonly #parts: LedgerParts & { defaultTtl: number };

  constructor(parts: LedgerParts & { defaultTtl: number }) {
    this.#parts = parts;
  }

  /** Holds `request.amount` if the approval hook and every limit allow it (checked again under the lock). */
  async reserve(agent: AgentId, request: ReserveRequest): Promise<Reservation> {
    const { store, logger, limits, approval } = this.#parts;
    const target: ApprovalRequest = {
      agent,
      amount: request.amount,
      provider: request.provider,
      kind: request.kind,
      ref: request.ref,
    };
    // One question for a subscription's whole commitment; the limits are checked on the first period.
    const withHold = request.withHold ?? 0n;
    const asked: ApprovalRequest =
      withHold > 0n ? { ...target, amount: request.amount + withHold, hold: withHold } : target;
    if (request.within === undefined) {
      await approval.ask(asked, (report) => limits.assertFits(report, agent, target));
    }
    const reservation = await store.transaction((tx) => this.#place(tx, agent, request, target));
    if (withHold > 0n && request.ref !== undefined) {
      approval.approveHold(agent, request.ref, withHold, reservation.expiresAt.getTime());
    }
    logger?.debug(
      { agent, id: reservation.id, amount: request.amount.toString(), kind: request.kind },
      "budget: reserved",
    );
    return reservation;
  }

  /** Draws from the sale (if any), checks every limit under the agent's lock, and records the hold. */
  async #place(tx: Queryable, agent: AgentId, request: ReserveRequest, target: ApprovalRequest) {
    const { createId, reader, limits, sales, defaultTtl } = this.#parts;
    if (request.within !== undefined) await sales.draw(tx, agent, request.within, request.amount);
    const report = limits.assertFits(await reader.load(tx, agent, "FOR UPDATE"), agent, target);
    const reservedAt = report.at;
    const expiresAt = new Date(reservedAt.getTime() + (request.ttlSeconds ?? defaultTtl) * 1000);
    const id = createId();
    await insertReservation(tx, {
      id,
      agent,
      provider: request.provider,
      kind: request.kind,
      ref: request.ref,
      amount: request.amount,
      reservedAt,
      expiresAt,
      parentId: request.within ?? null,
    });
    return {
      id,
      agent,
      provider: request.provider,
      kind: request.kind,
      ref: request.ref,
      amount: request.amount,
      reservedAt,
      expiresAt,
    } satisfies Reservation;
  }

  /** Frees the hold (giving a drawn amount back to its sale). Idempotent. */
  async release(reservation: { id: string }): Promise<SpendOutcome> {
    const { store, clock, logger, sales } = this.#parts;
    return store.transaction(async (tx) => {
      const row = await lockSpend(tx, reservation.id);
      if (row.status !== "reserved") return outcomeOf(row);
      await markReleased(tx, row.id, new Date(clock.now()));
      await deletePendingPayment(tx, row.id);
      await sales.giveBack(tx, row, row.reserved);
      logger?.debug({ id: row.id }, "budget: released");
      return { ...outcomeOf(row), status: "released", committed: 0n } satisfies SpendOutcome;
    });
  }

  /** Keeps the reservation held past its expiry as a payment whose outcome is unknown. Idempotent. */
  async pend(reservation: { id: string }, payment: PendedPayment): Promise<void> {
    const { store, clock, logger } = this.#parts;
    const nonce = parseOrThrow(NonceSchema, payment.nonce, "payment nonce");
    const payer: Address = parseOrThrow(AddressSchema, payment.payer, "payer address");
    const token =
      payment.token === undefined ? undefined : parseOrThrow(AddressSchema, payment.token, "token address");
    if (!Number.isSafeInteger(payment.validBefore) || payment.validBefore <= 0) {
      throw new TollgateError(ErrorCode.InvalidRequest, "validBefore must be unix seconds");
    }
    await store.transaction(async (tx) => {
      const row = await lockSpend(tx, reservation.id);
      if (row.status !== "reserved") return;
      const now = new Date(clock.now());
      // Held past the reservation's own expiry: the money may move at any time before validBefore.
      const until = new Date(Math.max(row.expires_at.getTime(), now.getTime() + PENDING_HOLD_MS));
      await extendReservation(tx, row.id, until);
      await insertPendingPayment(tx, {
        spendId: row.id,
        agent: row.agent,
        payer,
        nonce,
        validBefore: payment.validBefore,
        amount: row.reserved,
        createdAt: now,
        target: payment.target,
        token,
      });
    });
    logger?.warn({ id: reservation.id, nonce }, "budget: payment outcome unknown, held until read back");
  }
}
