/**
 * Reads a payment back from a facilitator the way its payer does: `GET /payments/:nonce` signed with
 * `X-Tollgate-Payer-Auth` (docs/facilitator.md, "Who may read what").
 */
import type { LocalAccount } from "viem";
import { paymentPath } from "../../src/client/getPayment.ts";
import { payerReadHeaders } from "../../src/client/payerReadHeaders.ts";

export async function readPaymentAsPayer(url: string, nonce: string, payer: LocalAccount): Promise<Response> {
  const path = paymentPath(nonce);
  return fetch(`${url}${path}`, { headers: await payerReadHeaders(payer, { method: "GET", path }) });
}
