/**
 * The specification's `buildPaymentRequired({ plan: planId })` (docs/protocol.md, "402 body"; docs/gate.md) as a free function:
 * a complete 402 body for a plan (and any other pricing) from a configured gate. A 402 needs the gate's
 * payee, network, token, memo secret and facilitator (the plan's terms come from its `GET /plans/:id`),
 * so the gate is its second argument: a gate `paymentGate` returned, or the options of one.
 * `gate.buildPaymentRequired({ plan })` is the same call on a gate you already hold.
 */

import { TollgateError } from "../protocol/errors.ts";
import type { PaymentRequired } from "../protocol/paymentRequired.ts";
import { type PaymentGateControls, type PaymentRequiredRequest, paymentGate } from "./paymentGate.ts";
import type { PaymentGateOptions } from "./paymentGateOptions.ts";

/**
 * Builds the 402 body for `request` on `gate`. Without a gate it throws `InvalidRequest` saying so
 * (never a `TypeError`). Given options, it builds a gate for the call: give the same `memoSecret` as
 * the serving gate, or that gate will refuse proofs of these memos.
 *
 * @example
 * const gate = paymentGate({ payTo, network, token, facilitator, memoSecret, publicOrigin, pricing });
 * const body = await gate.buildPaymentRequired({ plan: "1" });
 * // or: await buildPaymentRequired({ plan: "1" }, gate)
 * return Response.json(body, { status: 402 });
 */
export async function buildPaymentRequired(
  request?: PaymentRequiredRequest,
  gate?: Pick<PaymentGateControls, "buildPaymentRequired"> | PaymentGateOptions,
): Promise<PaymentRequired> {
  if (gate === undefined || gate === null) {
    throw new TollgateError(
      "InvalidRequest",
      "buildPaymentRequired needs a configured gate: call gate.buildPaymentRequired({ plan }) on the gate paymentGate() returned, or pass the gate (or its options) as the second argument",
      { details: { reason: "no_gate" } },
    );
  }
  if (typeof (gate as Partial<PaymentGateControls>).buildPaymentRequired === "function") {
    return (gate as Pick<PaymentGateControls, "buildPaymentRequired">).buildPaymentRequired(request);
  }
  const built = paymentGate(gate as PaymentGateOptions);
  try {
    return await built.buildPaymentRequired(request);
  } finally {
    await built.close();
  }
}
