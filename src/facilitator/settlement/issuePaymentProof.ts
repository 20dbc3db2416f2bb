/**
 * The payment proof of a settled Tollgate payment (docs/protocol.md, "Payment proof"): signed once, when the payment is
 * marked settled, and kept with the row so a repeated `/authorize` returns the very same proof. x402
 * payments carry no memo and get none.
 */
import type { Hash } from "viem";
import type { Network } from "../../protocol/network.ts";
import type { PaymentProof } from "../../protocol/paymentProof.ts";
import type { PaymentRow } from "../paymentRecords.ts";
import { type ProofKey, signPaymentProof } from "../proofKeys.ts";

export function issuePaymentProof(
  key: ProofKey,
  row: PaymentRow,
  settled: { txHash: Hash; nowSeconds: number; ttlSeconds: number },
): PaymentProof | null {
  if (row.memo === null) return null;
  return signPaymentProof(key, {
    v: "1",
    scheme: "exact",
    network: row.network as Network,
    token: row.token,
    amount: row.amount.toString(),
    payer: row.payer,
    payTo: row.pay_to,
    memo: row.memo,
    tx: settled.txHash,
    iat: settled.nowSeconds,
    exp: settled.nowSeconds + settled.ttlSeconds,
  });
}
