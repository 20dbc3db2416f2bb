/**
 * The `channel` scheme's id and one-line description, apart from its parts: each side's list of
 * built-in schemes (the gate's, the payer's, the facilitator's, the agent's) names the scheme from
 * here and loads only its own part.
 */
export const channelAbout = {
  id: "channel",
  description:
    "pay per request from a prepaid channel: P-256 session-key vouchers checked locally, claimed in batches",
} as const;
