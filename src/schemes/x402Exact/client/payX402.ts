/**
 * Paying servers that speak only x402 v2 (docs/x402.md): the x402 `exact` scheme's client side,
 * which lives with its scheme in `src/schemes/x402Exact/client.ts`.
 */
export {
  type CreateX402PaymentOptions,
  createPayX402,
  createX402Payment,
  MAX_AUTHORIZATION_SECONDS,
  type X402Payer,
  type X402Payment,
} from "../client.ts";
