/**
 * The `subscription` scheme's id and one-line description, apart from its parts: each side's list of
 * built-in schemes (the gate's, the payer's, the facilitator's, the agent's) names the scheme from
 * here and loads only its own part.
 */
export const subscriptionAbout = {
  id: "subscription",
  description: "a SubscriptionManager plan: subscribers send X-Tollgate-Sub and a sub-auth token",
} as const;
