/**
 * The x402 `exact` scheme's agent part: an x402 server's `exact` requirements pay the listed one-time
 * price, and are held to it as a Tollgate `exact` option is.
 */
import type { AgentSchemePart } from "../../agent/agentScheme.ts";
import { oneTimeDeviation } from "../exact/agent.ts";
import { x402Purchase } from "./agent/x402Purchase.ts";

export const x402ExactAgent: AgentSchemePart = {
  x402: {
    schemes: ["exact"],
    check: (requirement, listed) => {
      if (!/^\d{1,78}$/.test(requirement.amount)) {
        return { field: "price", listed: "an amount", asked: requirement.amount };
      }
      return oneTimeDeviation(requirement.amount, listed);
    },
  },
  purchase: x402Purchase,
};
