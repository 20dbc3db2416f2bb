/**
 * Payments whose outcome is unknown, as the ledger keeps them (`agent_pending_payments`, one row per
 * reservation): written by `pend`, forgotten by the commit or release that settles the reservation.
 */
import { type Address, getAddress } from "viem";
import { z } from "zod";
import { BigintColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type { PendingPayment } from "./budgetLedgerTypes.ts";
import type { AgentId } from "./budgetLimits.ts";

const PendingRowSchema = z.object({
  spend_id: z.string(),
  agent: z.string(),
  payer: z.string(),
  nonce: z.string(),
  valid_before: BigintColumnSchema,
  amount: BigintColumnSchema,
  created_at: TimestampColumnSchema,
  target: z.string().nullable(),
  token: z.string().nullable(),
});

/** Keeps the payment held by reservation `spendId` (once: a second `pend` changes nothing). */
export async function insertPendingPayment(
  tx: Queryable,
  payment: {
    spendId: string;
    agent: string;
    payer: Address;
    nonce: string;
    validBefore: number;
    amount: bigint;
    createdAt: Date;
    target: string | undefined;
    token: Address | undefined;
  },
): Promise<void> {
  await tx.query(
    `INSERT INTO agent_pending_payments (spend_id, agent, payer, nonce, valid_before, amount, created_at, target, token)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (spend_id) DO NOTHING`,
    [
      payment.spendId,
      payment.agent,
      payment.payer.toLowerCase(),
      payment.nonce.toLowerCase(),
      payment.validBefore,
      payment.amount,
      payment.createdAt,
      payment.target === undefined ? null : payment.target.slice(0, 2048),
      payment.token === undefined ? null : payment.token.toLowerCase(),
    ],
  );
}

/** Forgets the pending payment of reservation `spendId`, if it had one. */
export async function deletePendingPayment(tx: Queryable, spendId: string): Promise<void> {
  await tx.query("DELETE FROM agent_pending_payments WHERE spend_id = $1", [spendId]);
}

/** The agent's pending payments, oldest first. */
export async function readPendingPayments(db: Queryable, agent: AgentId): Promise<PendingPayment[]> {
  const rows = await queryParsed(
    db,
    PendingRowSchema,
    `SELECT spend_id, agent, payer, nonce, valid_before, amount, created_at, target, token FROM agent_pending_payments
      WHERE agent = $1 ORDER BY created_at, spend_id`,
    [agent],
  );
  return rows.map((r) => ({
    spendId: r.spend_id,
    agent,
    payer: getAddress(r.payer),
    nonce: r.nonce as `0x${string}`,
    validBefore: Number(r.valid_before),
    amount: r.amount,
    createdAt: r.created_at,
    ...(r.target === null ? {} : { target: r.target }),
    ...(r.token === null ? {} : { token: getAddress(r.token) }),
  }));
}
