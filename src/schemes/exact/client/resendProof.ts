/**
 * A request paid with an `exact` proof was answered 5xx (docs/client.md): the gate hands a proof back
 * when its handler fails (or never took it, for a fault of its own), so the same proof is re-sent, at
 * most `maxResends` times, while it is still good. Never pays again: a 402 to a re-sent proof ends the
 * call too, since it would mean paying a seller that just failed a second time. If the seller keeps
 * failing, `PaidRequestFailed` carries the proof, which stays redeemable until it expires.
 */
import type { PaymentReceipt } from "../../../client/payerTypes.ts";
import { readPaymentRequired } from "../../../client/readPaymentRequired.ts";
import { parseRetryAfter } from "../../../http/facilitatorClient.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { HeaderName } from "../../../protocol/header.ts";
import type { ClientPayment, ClientResendContext } from "../../types.ts";

export async function resendProof(
  payment: ClientPayment,
  failed: Response,
  context: ClientResendContext,
): Promise<Response> {
  const receipt = payment.receipt as PaymentReceipt;
  const header = receipt.header;
  let response = failed;
  let sends = 1;
  let refused: string | undefined;
  // Read once per 5xx: the last one's body goes into the error, whatever ends the loop.
  let body = (await response.text()).slice(0, 2_000);
  for (;;) {
    const retryAfter = parseRetryAfter(response.headers.get(HeaderName.RetryAfter));
    const delay = retryAfter === undefined ? context.delayMs : retryAfter * 1000;
    if (
      sends > context.maxResends ||
      delay > context.maxDelayMs ||
      context.clock.now() + delay >= receipt.proof.exp * 1000
    ) {
      break;
    }
    await context.sleep(delay);
    const next = await context.send({ [HeaderName.Payment]: header });
    sends++;
    if (next.status < 500 && next.status !== 402) return next;
    if (next.status === 402) {
      const offer = await readPaymentRequired(next);
      refused = offer?.kind === "tollgate" ? offer.body.message : "402 to the same proof";
      break;
    }
    response = next;
    body = (await response.text()).slice(0, 2_000);
  }
  throw paidRequestFailed(context.request, receipt, { status: response.status, body, sends, refused });
}

function paidRequestFailed(
  request: Request,
  receipt: PaymentReceipt,
  last: { status: number; body: string; sends: number; refused: string | undefined },
): TollgateError {
  const { status, body, sends, refused } = last;
  const until = new Date(receipt.proof.exp * 1000).toISOString();
  const tries = `${sends} ${sends === 1 ? "try" : "tries"}`;
  return new TollgateError(
    "PaidRequestFailed",
    refused === undefined
      ? `${request.method} ${request.url} answered ${status} after being paid (${tries}); the proof stays redeemable until ${until}`
      : `${request.method} ${request.url} answered ${status} after being paid, and the gate refused the same proof when re-sent (${refused}): it did not give the payment back`,
    {
      details: {
        url: request.url,
        status,
        body,
        sends,
        paid: true,
        amount: receipt.proof.amount,
        payer: receipt.proof.payer,
        payTo: receipt.proof.payTo,
        transaction: receipt.proof.tx,
        proof: receipt.header,
        ...(refused === undefined ? { redeemableUntil: receipt.proof.exp } : { refused }),
      },
    },
  );
}
