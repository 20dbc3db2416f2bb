/**
 * Sale reservations: an open reservation without a parent that purchases draw from
 * (`reserve(…, { within })`), so a reseller's sale is checked against the total and daily limits once.
 * A purchase released or committed for less gives the rest back while the sale is open.
 */
import { z } from "zod";
import type { Clock } from "../../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { BigintColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import { lockAgentBudget } from "./budgetLimitRecords.ts";
import type { AgentId } from "./budgetLimits.ts";
import { usdc } from "./ledgerErrors.ts";
import type { SpendRow } from "./spendRecords.ts";

const ReservedRowSchema = z.object({ reserved: BigintColumnSchema });

export type SaleReservations = {
  /** Takes `amount` out of the agent's open sale reservation `id` (taking its lock); throws if it cannot. */
  draw(tx: Queryable, agent: AgentId, id: string, amount: bigint): Promise<void>;
  /** Gives `amount` of a drawn reservation back to its sale, if the sale is still open. */
  giveBack(tx: Queryable, row: SpendRow, amount: bigint): Promise<void>;
  /** What the agent's open sale reservation `id` still holds; 0 once closed or expired, or not its. */
  held(db: Queryable, agent: AgentId, id: string): Promise<bigint>;
};

export function createSaleReservations(clock: Clock): SaleReservations {
  async function draw(tx: Queryable, agent: AgentId, id: string, amount: bigint) {
    await lockAgentBudget(tx, agent);
    const drawn = await tx.query(
      `UPDATE agent_spends SET reserved = reserved - $3
        WHERE id = $1 AND agent = $2 AND status = 'reserved' AND parent_id IS NULL AND reserved >= $3
          AND expires_at > $4
        RETURNING id`,
      [id, agent, amount, new Date(clock.now())],
    );
    if (drawn.length === 0) {
      throw new TollgateError(
        ErrorCode.BudgetExceeded,
        `${usdc(amount)} is more than the sale reservation ${id} of agent "${agent}" still holds (or it is closed)`,
        { details: { agent, limit: "sale", requested: amount.toString(), sale: id } },
      );
    }
  }

  async function giveBack(tx: Queryable, row: SpendRow, amount: bigint) {
    if (row.parent_id === null || amount <= 0n) return;
    await tx.query(
      `UPDATE agent_spends SET reserved = reserved + $2
        WHERE id = $1 AND status = 'reserved' AND expires_at > $3`,
      [row.parent_id, amount, new Date(clock.now())],
    );
  }

  async function held(db: Queryable, agent: AgentId, id: string) {
    const row = await queryOneParsed(
      db,
      ReservedRowSchema,
      `SELECT reserved FROM agent_spends
        WHERE id = $1 AND agent = $2 AND status = 'reserved' AND parent_id IS NULL AND expires_at > $3`,
      [id, agent, new Date(clock.now())],
    );
    return row?.reserved ?? 0n;
  }

  return { draw, giveBack, held };
}
