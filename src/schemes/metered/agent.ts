/**
 * The `metered` scheme's agent part: a listed plan whose calls draw units from its allowance, then pay
 * overage. Its gate offers the plan as a `subscription` option, so this part answers for listings
 * only; the subscription part checks and weighs the option.
 */
import { type AgentSchemePart, usdcText } from "../../agent/agentScheme.ts";
import { describeOverage, describePeriod } from "../subscription/agent/describePlan.ts";
import { planRef } from "../subscription/agent.ts";

export const meteredAgent: AgentSchemePart = {
  listing: {
    types: ["metered"],
    describe: (entry) => {
      if (entry.type !== "metered") return `metered subscription ${usdcText(entry.amount)}`;
      return `metered subscription ${describePeriod(entry)} with ${entry.includedUnits} units included${describeOverage(entry)}; a call uses ${entry.unitsPerCall} unit${entry.unitsPerCall === 1 ? "" : "s"}`;
    },
    commits: true,
    spend: (entry, seller) => ({
      kind: "subscription",
      ref: planRef("planId" in entry ? entry.planId : "?", seller),
    }),
  },
};
