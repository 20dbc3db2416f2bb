/**
 * The toy scheme's agent part: a paid tool weighs a `toy` option as paying once (the policy's
 * one-time choice at the option's price), holds that price in the budget before the client part
 * mints the ticket, and books what the ticket paid as the call's spend.
 */
import type { AgentSchemePart } from "../../../src/agent/agentScheme.ts";

export const toyAgent: AgentSchemePart = {
  offer: {
    check: () => undefined,
    policyTerms: (option) => ({ choice: "oneTime", terms: { amount: BigInt(option.amount) } }),
    spendMode: "one-time",
  },
  purchase: {
    paysOnce: true,
    tool: () => (call) => ({
      async hold({ option, seller }) {
        call.spend.takeAllowance(BigInt(option.amount));
        await call.spend.hold({ amount: BigInt(option.amount), provider: seller, kind: "one-time" });
      },
      schemePaid(payment) {
        call.spend.paid += payment.amount;
      },
    }),
  },
};
