/**
 * The `exact` scheme's part in a paid tool's purchase (src/agent/paidTool/purchasePart.ts): the
 * policy's one-time choice. Its price is held against the sale's allowance and reserved in the budget
 * before the proof is signed, by the option's memo, so a payment whose answer is lost keeps its
 * reservation (held pending, src/agent/paidTool/recoveringPayer.ts).
 */
import type { PurchasePart } from "../../../agent/paidTool/purchasePart.ts";

export const exactPurchase: PurchasePart = {
  paysOnce: true,
  tool: () => (call) => ({
    async hold({ option, seller }) {
      call.spend.takeAllowance(BigInt(option.amount));
      await call.spend.hold(
        { amount: BigInt(option.amount), provider: seller, kind: "one-time" },
        option.memo,
      );
    },
  }),
};
