/** `tollgate/client`: the payer library — `createPayer`, `fetchWithPayment` and the facilitator client (docs/client.md). */

export { privateKeyAccount } from "../chain/signers/privateKeyAccount.ts";
export {
  createFacilitatorClient,
  type FacilitatorClient,
  type FacilitatorClientOptions,
  type FetchFn,
  parseRetryAfter,
  type RequestOptions,
  sameFacilitatorUrl,
} from "../http/facilitatorClient.ts";
export { subscribeToPlan } from "../schemes/subscription/client/subscribeToPlan.ts";
export {
  type InactiveSubscriptionState,
  SubscriptionNotActiveError,
} from "../schemes/subscription/client/subscriptionNotActiveError.ts";
export { createPayX402, createX402Payment } from "../schemes/x402Exact/client/payX402.ts";
export {
  type CreatePayerOptions,
  createPayer,
  type PaidResponse,
  type Payer,
  type PayTermsOptions,
} from "./createPayer.ts";
export type { ChooseContext, ChoosePaymentOption, FetchWithPaymentOptions } from "./fetchOptions.ts";
export { fetchWithPayment } from "./fetchWithPayment.ts";
export { getPayment, paymentPath } from "./getPayment.ts";
export { parseTokenAmount, type TokenAmountInput } from "./parseTokenAmount.ts";
export { parseUsdcCeiling } from "./parseUsdcCeiling.ts";
export { payerReadHeaders } from "./payerReadHeaders.ts";
export type { PayerSigner, PaymentReceipt, PayOptions, PayX402 } from "./payerTypes.ts";
export type { PaymentTerms } from "./paymentTerms.ts";
export { type PaymentRequiredOffer, readPaymentRequired } from "./readPaymentRequired.ts";
export { type ProviderSigner, registerProvider } from "./registerProvider.ts";
