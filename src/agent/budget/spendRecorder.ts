/**
 * The spend recorder: `commit` turns a reservation into a spend of what was actually paid (at most the
 * reservation), in the transaction that holds the agent's lock, so a later reservation sees it at once.
 * It adds to the agent's totals, starts the subscription a subscription spend paid for, forgets a
 * pending payment, and gives what was not spent back to the sale the reservation was drawn from.
 */
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import type { Queryable } from "../../store/store.ts";
import type { SpendOutcome } from "./budgetLedgerTypes.ts";
import { usdc } from "./ledgerErrors.ts";
import type { LedgerParts } from "./ledgerParts.ts";
import { deletePendingPayment } from "./pendingPaymentRecords.ts";
import {
  addToSpendTotals,
  lockSpend,
  markCommitted,
  outcomeOf,
  type SpendRow,
  startSubscription,
} from "./spendRecords.ts";

/** Records committed spends in the ledger's store; `createBudgetLedger` builds one. */
export class SpendRecorder {
  readonly #parts: Pick<LedgerParts, "store" | "clock" | "logger" | "sales">;

  constructor(parts: Pick<LedgerParts, "store" | "clock" | "logger" | "sales">) {
    this.#parts = parts;
  }

  /** Records what was paid against the reservation (default: all of it); the rest is freed. Idempotent. */
  async commit(reservation: { id: string }, actualAmount?: bigint): Promise<SpendOutcome> {
    const { store, logger } = this.#parts;
    if (actualAmount !== undefined && actualAmount < 0n) {
      throw new TollgateError(ErrorCode.InvalidRequest, "a committed amount must not be negative");
    }
    const outcome = await store.transaction(async (tx) => {
      const row = await lockSpend(tx, reservation.id);
      if (row.status === "committed") return this.#recommitted(row, actualAmount);
      return this.#record(tx, row, this.#committable(row, actualAmount));
    });
    logger?.debug({ id: outcome.id, committed: outcome.committed.toString() }, "budget: committed");
    return outcome;
  }

  /** Committing again returns the same outcome, unless it names another amount. */
  #recommitted(row: SpendRow, actualAmount: bigint | undefined): SpendOutcome {
    if (actualAmount !== undefined && actualAmount !== row.committed) {
      throw new TollgateError(ErrorCode.InvalidRequest, "reservation already committed with another amount", {
        details: { id: row.id, committed: String(row.committed), requested: actualAmount.toString() },
      });
    }
    return outcomeOf(row);
  }

  /** What committing an open or released reservation records; throws when it cannot be committed. */
  #committable(row: SpendRow, actualAmount: bigint | undefined): bigint {
    if (row.status === "released") {
      throw new TollgateError(ErrorCode.InvalidRequest, "reservation was released; it cannot be committed", {
        details: { id: row.id },
      });
    }
    const amount = actualAmount ?? row.reserved;
    if (amount > row.reserved) {
      throw new TollgateError(
        ErrorCode.BudgetExceeded,
        `cannot commit ${usdc(amount)} against a reservation of ${usdc(row.reserved)}`,
        {
          details: {
            id: row.id,
            limit: "reservation",
            limitAmount: row.reserved.toString(),
            requested: amount.toString(),
          },
        },
      );
    }
    return amount;
  }

  async #record(tx: Queryable, row: SpendRow, amount: bigint): Promise<SpendOutcome> {
    const { clock, logger, sales } = this.#parts;
    const now = new Date(clock.now());
    // An expired hold no longer counted, and its room may have gone to other spends; the money
    // moved anyway, so the spend is recorded (flagged late) rather than hidden from later checks.
    const late = row.expires_at.getTime() <= now.getTime();
    await markCommitted(tx, row.id, { amount, at: now, late });
    await deletePendingPayment(tx, row.id);
    await sales.giveBack(tx, row, row.reserved - amount);
    await addToSpendTotals(tx, { agent: row.agent, provider: row.provider, kind: row.kind, amount });
    if (row.kind === "subscription" && row.ref !== null) {
      await startSubscription(tx, {
        agent: row.agent,
        ref: row.ref,
        provider: row.provider,
        amount,
        at: now,
      });
    }
    if (late) {
      logger?.warn(
        { agent: row.agent, id: row.id, amount: amount.toString() },
        "budget: committed after expiry",
      );
    }
    return { ...outcomeOf(row), status: "committed", committed: amount, late } satisfies SpendOutcome;
  }
}
