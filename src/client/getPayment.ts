/**
 * `GET /payments/:nonce` (docs/facilitator.md, "Who may read what"): a payment's status, transaction
 * and, once settled, its proof. Only the payment's payee (its provider API key as
 * `authorization: Bearer …` in `options.headers`) or its payer (`payerReadHeaders`, or simply
 * `payer.payment(nonce)`) may read it; anyone else gets `Unauthorized` (no credential) or `NotFound`.
 */

import {
  type FacilitatorClient,
  type RequestOptions,
  requireFacilitator,
} from "../http/facilitatorClient.ts";
import { TollgateError } from "../protocol/errors.ts";
import { type PaymentRecord, PaymentRecordSchema } from "../protocol/facilitator.ts";

/** `/payments/<nonce>`: the facilitator-relative path a payer signs for its read-back. */
export function paymentPath(nonce: string): string {
  if (!/^0x[0-9a-fA-F]{64}$/.test(nonce)) {
    throw new TollgateError("InvalidRequest", "a payment nonce is 0x and 64 hex digits", {
      details: { nonce },
    });
  }
  return `/payments/${nonce}`;
}

/**
 * @example
 * const record = await getPayment(facilitator, nonce, { headers: { authorization: `Bearer ${apiKey}` } });
 */
export function getPayment(
  facilitator: Pick<FacilitatorClient, "request">,
  nonce: string,
  options: RequestOptions = {},
): Promise<PaymentRecord> {
  requireFacilitator(facilitator, "getPayment(facilitator, nonce, { headers })");
  return facilitator.request("GET", paymentPath(nonce), PaymentRecordSchema, options);
}
