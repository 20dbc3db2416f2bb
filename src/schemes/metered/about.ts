/**
 * The `metered` scheme's id and one-line description, apart from its parts: each side's list of
 * built-in schemes (the gate's, the payer's, the facilitator's, the agent's) names the scheme from
 * here and loads only its own part.
 */
export const meteredAbout = {
  id: "metered",
  description: "a metered plan: each call draws units from the period's allowance, then pays overage",
} as const;
