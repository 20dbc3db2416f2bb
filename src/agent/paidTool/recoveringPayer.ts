/**
 * A payment whose `/authorize` failed is read back by its nonce (src/agent/budget/pendingPayments.ts):
 * settled after all, the call goes on with its proof; outcome unknown, the reservation the call made for
 * its option stays held (pending) instead of released, and the tool remembers the call's target so the
 * next call to it waits for the read-back.
 */
import type { Payer } from "../../client/createPayer.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import type { PaymentOption } from "../../protocol/paymentRequired.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import { recoverPayment } from "../budget/pendingPayments.ts";
import type { CallSpend } from "./callSpend.ts";
import type { PurchaseTool } from "./purchasePart.ts";
import type { ToolMemory } from "./toolMemory.ts";

/** `payer`, whose failed payments of options this call reserved for are read back. */
export function recoveringPayer(
  payer: Payer,
  tool: PurchaseTool,
  memory: ToolMemory,
  call: { spend: CallSpend; target: string; schemes: AgentSchemes },
): Payer {
  const pay = async (option: PaymentOption, payOptions: Parameters<Payer["pay"]>[1]) => {
    try {
      return await payer.pay(option as never, payOptions as never);
    } catch (error) {
      const reservation = call.spend.heldFor(option.memo);
      if (reservation === undefined || typeof payer.payment !== "function") throw error;
      try {
        return await recoverPayment(option, error, reservation, {
          agent: tool.agent,
          budget: tool.budget,
          payer,
          clock: tool.clock,
          wait: (ms) => tool.wait(ms),
          target: call.target,
          schemes: call.schemes,
        });
      } catch (recovered) {
        if (isTollgateError(recovered) && recovered.details?.pending === true) {
          // Held in the ledger as pending: not this call's to commit or release any more.
          call.spend.untrack(reservation);
          call.spend.pending += reservation.amount;
          memory.lost(String(recovered.details.nonce), call.target);
        }
        throw recovered;
      }
    }
  };
  return { ...payer, pay: pay as Payer["pay"] };
}
