import type { MiddlewareHandler } from "hono";
import type { GatePayment, PaymentGate } from "./paymentGate.ts";

/** Hono `Env` of routes behind the gate: `c.get("payment")` is the accepted payment, if any. */
export type PaymentGateEnv = { Variables: { payment: GatePayment | undefined } };

/**
 * The gate as Hono middleware; mount it on the paid path prefix. A refused request is answered by the
 * gate and never reaches the handler; a paid one reaches it with `c.get("payment")` set, and the
 * gate's headers (`X-PAYMENT-RESPONSE`) are added to whatever the handler answers. The handler's
 * status is reported to the gate before the response leaves, so a paid request answered 5xx (or whose
 * handler threw) gives the payer its proof back.
 *
 * @example
 * const app = new Hono<PaymentGateEnv>();
 * app.use("/api/*", honoPaymentGate(gate));
 * app.get("/api/reports/:id", (c) => c.json({ report: c.req.param("id"), paidBy: c.get("payment")?.payer }));
 */
export function honoPaymentGate(gate: PaymentGate): MiddlewareHandler<PaymentGateEnv> {
  return async function honoPaymentGate(c, next) {
    const result = await gate(c.req.raw);
    if (result.kind === "respond") return result.response;
    c.set("payment", result.paid);
    try {
      await next();
    } catch (error) {
      // Hono turns a handler's error into a response through `onError`; one rethrown here is a 500.
      await result.complete(500);
      throw error;
    }
    await result.complete(c.res.status);
    if ([...result.headers.keys()].length === 0) return;
    try {
      for (const [name, value] of result.headers) c.res.headers.set(name, value);
    } catch {
      // A handler may return a Response with immutable headers (e.g. one from `fetch`): copy it.
      const response = new Response(c.res.body, c.res);
      for (const [name, value] of result.headers) response.headers.set(name, value);
      c.res = response;
    }
  };
}
