import { randomBytes } from "node:crypto";
import { findPaymentByNonce, insertPayment, type PaymentRow } from "../../src/facilitator/paymentRecords.ts";
import type { Queryable } from "../../src/store/store.ts";

const hex = (bytes: number) => `0x${randomBytes(bytes).toString("hex")}` as const;

/**
 * A pending payment row with fresh random nonce, addresses and signature, as `/authorize` inserts one:
 * an x402 payment without `memo`, a Tollgate one with it. For tests of what happens to rows later.
 */
export async function insertTestPayment(db: Queryable, memo?: string): Promise<PaymentRow> {
  const inserted = await insertPayment(db, {
    nonce: hex(32),
    network: "eip155:31337",
    token: hex(20),
    payer: hex(20),
    payTo: hex(20),
    amount: 10_000n,
    memo,
    source: memo === undefined ? "x402" : "tollgate",
    validAfter: 0n,
    validBefore: 4_000_000_000n,
    signature: hex(65),
  });
  if (inserted === undefined) throw new Error("the test payment's nonce was taken");
  return (await findPaymentByNonce(db, inserted.nonce))!;
}
