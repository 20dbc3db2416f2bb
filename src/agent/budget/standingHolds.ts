/**
 * Standing holds (docs/budgets.md): what a subscription may still pull on chain, held in the budget
 * without expiry. `hold` is checked like a reservation (per provider, daily, total, and the approval
 * hook); `charge` records money that already moved, never refused; `releaseHold` ends one. Each write
 * runs in one store transaction that takes the agent's row lock first.
 */
import { type Address, getAddress } from "viem";
import type { z } from "zod";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import type { Queryable } from "../../store/store.ts";
import type {
  ApprovalRequest,
  ChargeOutcome,
  ChargeRequestSchema,
  HoldRequestSchema,
} from "./budgetLedgerTypes.ts";
import { lockAgentBudget } from "./budgetLimitRecords.ts";
import type { AgentId, SpendKind } from "./budgetLimits.ts";
import { addToHold, emptyHold, type HoldRow, lockHold, readHold, updateHold } from "./holdRecords.ts";
import type { LedgerParts } from "./ledgerParts.ts";
import { addToSpendTotals, insertSettledSpend } from "./spendRecords.ts";

type HoldRequest = z.output<typeof HoldRequestSchema>;
type ChargeRequest = z.output<typeof ChargeRequestSchema>;

/** An agent's standing holds, kept in the ledger's store; `createBudgetLedger` builds one. */
export class StandingHolds {
  readonly #parts: LedgerParts;

  constructor(parts: LedgerParts) {
    this.#parts = parts;
  }

  /** Places or grows the ref's hold if the limits and the approval hook allow it; returns what it holds. */
  async hold(agent: AgentId, request: HoldRequest): Promise<bigint> {
    const { store, logger, reader, limits, approval } = this.#parts;
    const target: ApprovalRequest = {
      agent,
      amount: request.amount,
      provider: request.provider,
      kind: "subscription",
      ref: request.ref,
    };
    // Approved with the subscription's first period: not asked again (once, up to what was approved).
    if (!approval.takeHoldApproval(agent, request.ref, request.amount)) {
      await approval.ask(target, (report) => limits.assertHoldFits(report, agent, target));
    }
    const held = await store.transaction(async (tx) => {
      const report = limits.assertHoldFits(await reader.load(tx, agent, "FOR UPDATE"), agent, target);
      return addToHold(tx, {
        agent,
        ref: request.ref,
        provider: request.provider,
        amount: request.amount,
        at: report.at,
      });
    });
    logger?.debug({ agent, ref: request.ref, amount: request.amount.toString() }, "budget: held");
    return held;
  }

  /** Records money the subscription moved, taking it from the ref's hold; never refused. */
  async charge(agent: AgentId, request: ChargeRequest): Promise<ChargeOutcome> {
    const { store } = this.#parts;
    return store.transaction(async (tx) => {
      await lockAgentBudget(tx, agent);
      const row = await lockHold(tx, agent, request.ref);
      if (row === undefined) {
        throw new TollgateError(ErrorCode.NotFound, `agent "${agent}" has no hold ${request.ref}`, {
          details: { agent, ref: request.ref },
        });
      }
      const amount =
        "amount" in request ? request.amount : request.total > row.charged ? request.total - row.charged : 0n;
      if (amount === 0n) {
        return { ref: row.ref, amount, beyondHold: 0n, held: row.held, charged: row.charged };
      }
      return this.#recordCharge(tx, agent, row, { ref: request.ref, kind: request.kind, amount });
    });
  }

  /** Records `amount` spent under the hold `row`, taking what the hold covers from it. */
  async #recordCharge(
    tx: Queryable,
    agent: AgentId,
    row: HoldRow,
    spend: { ref: string; kind: SpendKind; amount: bigint },
  ): Promise<ChargeOutcome> {
    const { clock, logger, createId } = this.#parts;
    const { amount } = spend;
    // The hold covers what it still holds; the rest moved beyond it.
    const beyondHold = amount > row.held ? amount - row.held : 0n;
    const take = amount - beyondHold;
    const now = new Date(clock.now());
    // A spend that already happened: recorded committed at once (its hold was checked when placed).
    await insertSettledSpend(tx, { id: createId(), agent, provider: row.provider, ...spend, at: now });
    await addToSpendTotals(tx, { agent, provider: row.provider, kind: spend.kind, amount });
    const held = row.held - take;
    const charged = row.charged + amount;
    await updateHold(tx, { agent, ref: row.ref, held, charged, at: now });
    if (beyondHold > 0n) {
      logger?.warn(
        { agent, ref: row.ref, amount: amount.toString(), beyondHold: beyondHold.toString() },
        "budget: a subscription took more than its hold",
      );
    }
    return { ref: row.ref, amount, beyondHold, held, charged };
  }

  /** Empties the ref's hold; returns what it still held. */
  async releaseHold(agent: AgentId, ref: string): Promise<bigint> {
    const { store, clock } = this.#parts;
    return store.transaction(async (tx) => {
      await lockAgentBudget(tx, agent);
      return emptyHold(tx, agent, ref, new Date(clock.now()));
    });
  }

  /** The ref's hold and what was charged under it, or undefined if it never had one. */
  async getHold(
    agent: AgentId,
    ref: string,
  ): Promise<{ provider: Address; held: bigint; charged: bigint } | undefined> {
    const { store } = this.#parts;
    const row = await readHold(store, agent, ref);
    return row === undefined
      ? undefined
      : { provider: getAddress(row.provider), held: row.held, charged: row.charged };
  }
}
