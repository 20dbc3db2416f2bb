/**
 * The payer's types that scheme client parts share with it: what it signs with, what a settled payment
 * returns, and the seam through which x402 servers are paid.
 */
import type { TypedDataSigner } from "../chain/signers/typedDataSigner.ts";
import type { AuthorizeResponse } from "../protocol/facilitator.ts";
import type { PaymentProof } from "../protocol/paymentProof.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import type { X402PaymentRequired } from "../protocol/x402.ts";
import type { SubAuthSigner } from "./subscriptionAuth.ts";

/**
 * What the payer signs with: an address and EIP-712 signing; a viem `LocalAccount` satisfies it.
 * Subscriptions also need EIP-191 `signMessage` (for sub-auth tokens), which a `LocalAccount` has.
 */
export type PayerSigner = TypedDataSigner & Partial<Pick<SubAuthSigner, "signMessage">>;

/** A settled payment: the proof, ready-made as the `X-PAYMENT` header value. */
export type PaymentReceipt = {
  option: PaymentOption;
  proof: PaymentProof;
  /** `base64(JSON(proof))` for `X-PAYMENT`. */
  header: string;
  /** The settling transaction, when the facilitator reported it. */
  settled: AuthorizeResponse["settled"];
};

/**
 * Pays a server that speaks only x402 v2 and returns the header to retry with (`PAYMENT-SIGNATURE`),
 * or `undefined` to decline. The seam through which standard x402 servers are paid.
 */
export type PayX402 = (
  paymentRequired: X402PaymentRequired,
  context: { request: Request; maxPrice: bigint },
) => Promise<{ name: string; value: string } | undefined>;
