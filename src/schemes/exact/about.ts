/**
 * The `exact` scheme's id and one-line description, apart from its parts: each side's list of
 * built-in schemes (the gate's, the payer's, the facilitator's, the agent's) names the scheme from
 * here and loads only its own part.
 */
export const exactAbout = {
  id: "exact",
  description: "pay once per request: an EIP-3009 transfer settled by the facilitator, shown as its proof",
} as const;
