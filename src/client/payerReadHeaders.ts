/**
 * The payer's credential for reading its own payments back from the facilitator
 * (`X-Tollgate-Payer-Auth`, src/protocol/payerReadAuth.ts): an EIP-191 signature over the method, the
 * facilitator-relative path and the current time, good for one minute and for that one read.
 */

import { requireMessageSigner, requireObject } from "../http/checkInput.ts";
import { type Clock, systemClock, unixSeconds } from "../protocol/clock.ts";
import { formatPayerAuth, PAYER_AUTH_HEADER, payerReadMessage } from "../protocol/payerReadAuth.ts";
import type { MessageSigner } from "./payerTypes.ts";

/**
 * @example
 * const headers = await payerReadHeaders(account, { method: "GET", path: paymentPath(nonce) });
 * const record = await getPayment(facilitator, nonce, { headers });
 */
export async function payerReadHeaders(
  signer: MessageSigner,
  request: { method: string; path: string },
  clock: Clock = systemClock,
): Promise<Record<string, string>> {
  const usage = "payerReadHeaders(account, { method, path }, clock?)";
  requireMessageSigner(signer, usage);
  requireObject(request, usage);
  const t = unixSeconds(clock);
  const signature = await signer.signMessage({ message: payerReadMessage({ ...request, t }) });
  return { [PAYER_AUTH_HEADER]: formatPayerAuth(t, signature) };
}
