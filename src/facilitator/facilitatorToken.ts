import type { SupportedTokenConfig } from "./checkSignedPayment.ts";

/** A token the facilitator settles in: what a payment's signature is checked against, and its decimals. */
export type FacilitatorToken = SupportedTokenConfig & { decimals: number };
