/**
 * The `x402Exact` scheme's id and one-line description, apart from its parts: each side's list of
 * built-in schemes (the gate's, the payer's, the facilitator's, the agent's) names the scheme from
 * here and loads only its own part.
 */
export const x402ExactAbout = {
  id: "x402Exact",
  description:
    "x402 v2 exact: a PAYMENT-SIGNATURE payload settled through the facilitator before the handler",
} as const;
