/**
 * The x402 `exact` scheme's part in a paid tool's purchase (src/agent/paidTool/purchasePart.ts):
 * servers that speak only x402 v2 are paid through the budget too (a paid tool's own `choose` disables
 * `fetchWithPayment`'s default). The 402 is held to the listing before signing (`OfferMismatch` with
 * nothing signed), the payment held against the sale's allowance and reserved.
 *
 * A payment the seller answered with an error, or not at all, may still be settled by its facilitator
 * until it expires, or never: unless the answer's `PAYMENT-RESPONSE` says it settled, it is held
 * pending when the tool has a chain to read it back from (src/agent/budget/pendingPayments.ts), instead
 * of being counted as spent; the ledger then records what the chain shows.
 */
import type { Address } from "viem";
import type { Reservation } from "../../../agent/budget/createBudgetLedger.ts";
import type { PurchaseCall, PurchasePart, PurchaseTool } from "../../../agent/paidTool/purchasePart.ts";
import type { PayX402 } from "../../../client/payerTypes.ts";
import { HeaderName, safeDecodeJsonHeader } from "../../../protocol/header.ts";
import { X402SettleResponseSchema } from "../../../protocol/x402.ts";
import { createX402Payment, type X402Payment } from "../client.ts";

/** The x402 payment a call signed and sent, until the seller's answer shows what became of it. */
type HeldX402 = { reservation: Reservation; payment: X402Payment; from: Address };

export const x402Purchase: PurchasePart = {
  tool: (tool) => (call) => {
    let held: HeldX402 | undefined;
    const pend = async (response: Response | undefined): Promise<void> => {
      const payment = held;
      held = undefined;
      if (payment === undefined || tool.chain === undefined) return;
      if (response !== undefined && saysSettled(response)) return;
      await pendUnsettled(payment, tool, call);
    };
    return {
      fetchOptions: () => ({
        payX402: async (paymentRequired, context) => {
          const paid = await payX402(tool, call, paymentRequired, context);
          if (paid === undefined) return undefined;
          held = paid.held;
          return paid.header;
        },
      }),
      async answered(response) {
        // Answered: an x402 payment still held is committed now, and a later fault must not pend it.
        if (!response.ok) await pend(response);
        held = undefined;
      },
      async unanswered() {
        // Sent and never answered (a connection cut): the same as an error answer without a settlement.
        await pend(undefined).catch((e: unknown) =>
          tool.logger?.warn({ err: e }, "an unanswered x402 payment could not be held pending"),
        );
      },
    };
  },
};

async function payX402(
  tool: PurchaseTool,
  call: PurchaseCall,
  paymentRequired: Parameters<PayX402>[0],
  context: Parameters<PayX402>[1],
): Promise<{ header: X402Payment["header"]; held: HeldX402 } | undefined> {
  const { payer, listing } = tool;
  if (payer.account === undefined) return undefined;
  // Checked before signing: a mismatch throws `OfferMismatch` with nothing signed.
  const { checked, pinned } = await tool.checkX402(paymentRequired);
  const payment = await createX402Payment(
    { network: payer.network, account: payer.account, facilitator: payer.facilitator },
    checked,
    { maxPrice: context.maxPrice },
  );
  const provider = listing?.seller ?? pinned ?? payment.requirements.payTo;
  call.provider = provider;
  call.spend.takeAllowance(payment.amount);
  const reservation = await call.spend.hold({ amount: payment.amount, provider, kind: "one-time" });
  call.spend.paid += payment.amount;
  call.paidOnce = true;
  return { header: payment.header, held: { reservation, payment, from: payer.account.address } };
}

/** Holds the payment pending in the ledger: no longer the call's to commit, and not yet spent. */
async function pendUnsettled(held: HeldX402, tool: PurchaseTool, call: PurchaseCall): Promise<void> {
  await tool.budget.pend(held.reservation, {
    payer: held.from,
    nonce: held.payment.nonce,
    validBefore: held.payment.validBefore,
    token: held.payment.asset,
    target: call.target,
  });
  call.spend.untrack(held.reservation);
  call.spend.paid -= held.payment.amount;
  call.spend.pending += held.payment.amount;
}

/** A `PAYMENT-RESPONSE` (x402) that says the payment settled. */
function saysSettled(response: Response): boolean {
  const header = response.headers.get(HeaderName.X402PaymentResponse);
  if (header === null) return false;
  const decoded = safeDecodeJsonHeader(header, X402SettleResponseSchema);
  return decoded.ok && decoded.value.success;
}
