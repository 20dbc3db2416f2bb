/**
 * Gets a checked payment into the settlement queue exactly once, or finds it there (the engine then
 * waits on the row it returns). The payment's nonce is UNIQUE in the store, so the same signed payment
 * sent twice, on one instance or several, is one row; a different payment naming a used nonce is
 * refused. A failed row is retried only when a fresh simulation passes (the payer may have topped up).
 */
import type { Clock } from "../../protocol/clock.ts";
import { unixSeconds } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { Store } from "../../store/store.ts";
import type { CheckablePayment } from "../checkSignedPayment.ts";
import { findPaymentByNonce, type PaymentRow, requeueFailedPayment } from "../paymentRecords.ts";
import type { PaymentChecks } from "./paymentChecks.ts";
import { markPaymentSettled, type PaymentOutcomeDeps } from "./paymentOutcomes.ts";
import type { PaymentQueue } from "./paymentQueue.ts";

export type PaymentIntakeDeps = {
  store: Store;
  network: string;
  clock: Clock;
  checks: PaymentChecks;
  queue: PaymentQueue;
  outcomeDeps: PaymentOutcomeDeps;
  /** A failed payment went back to the queue. */
  signal: () => void;
};

/** Whether the row holds exactly this signed payment. */
export function sameSignedPayment(row: PaymentRow, payment: CheckablePayment): boolean {
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

/** Returns the row to wait on. */
export async function enqueuePayment(
  deps: PaymentIntakeDeps,
  payment: CheckablePayment,
  source: "tollgate" | "x402",
): Promise<PaymentRow> {
  const a = payment.authorization;
  await deps.checks.checkOffChain(payment);
  // No read of the store first: nearly every payment is new, and one already there is found when
  // its insert meets the nonce (below) or when the chain refuses it here.
  try {
    await deps.checks.simulate(payment);
  } catch (error) {
    // The row answers, not the chain: a payment queued before (on this instance or another one) may
    // have been settled since (nonce used), its payer's balance moved after it was queued, or the node
    // be unreachable; the same signed payment then waits for that row's outcome (its proof), and a
    // different one is refused by `resume`. A row is always written before its nonce is sent, so no
    // row means someone else used the nonce, and the chain's refusal stands.
    if (!(error instanceof TollgateError)) throw error;
    const queued = await deps.queue.lookUp(a.nonce);
    if (queued === undefined) throw error;
    return resume(deps, queued, payment);
  }
  const inserted = await deps.queue.insert({
    nonce: a.nonce,
    network: deps.network,
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
  const winner = await deps.queue.lookUp(a.nonce);
  if (winner === undefined) throw new TollgateError("Internal", "payment row vanished after a conflict");
  return resume(deps, winner, payment);
}

async function resume(
  deps: PaymentIntakeDeps,
  row: PaymentRow,
  payment: CheckablePayment,
): Promise<PaymentRow> {
  const { store } = deps;
  if (!sameSignedPayment(row, payment)) {
    throw new TollgateError("NonceAlreadyUsed", "another payment already used this authorization nonce", {
      details: { nonce: row.nonce },
    });
  }
  if (row.status !== "failed") return row;
  try {
    await deps.checks.simulate(payment);
  } catch (error) {
    // The row was queued once, so its nonce was unused then: if it has since been used for exactly
    // this transfer (by a third party), the payee was paid and the payment is settled.
    if (!(error instanceof TollgateError) || error.code !== "NonceAlreadyUsed") throw error;
    const use = await deps.checks.onChainUse(row);
    if (use.kind !== "matched") throw error;
    await store.transaction((tx) =>
      markPaymentSettled(
        deps.outcomeDeps,
        tx,
        row,
        { txHash: use.hash, blockNumber: use.blockNumber, nowSeconds: unixSeconds(deps.clock) },
        "failed",
      ),
    );
    return (await findPaymentByNonce(store, row.nonce)) ?? row;
  }
  if (await requeueFailedPayment(store, row.id)) deps.signal();
  return (await findPaymentByNonce(store, row.nonce)) ?? row;
}
