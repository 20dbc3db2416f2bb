import type { MiddlewareHandler } from "hono";
import { peerAddressOf } from "../http/rateLimits.ts";
import type { ServedSubscription } from "../schemes/types.ts";
import { runInGateContext } from "./gateContext.ts";
import { eachGateHeader } from "./gatePass.ts";
import { normalizeRequestTarget, targetRefusal } from "./normalizeRequestTarget.ts";
import type { GatePayment, PaymentGate } from "./paymentGate.ts";

/**
 * Hono `Env` of routes behind the gate: `c.get("payment")` is the accepted one-time payment, if any;
 * `c.get("subscription")` the subscription the request was served under (id, plan, subscriber, units
 * and overage charged, and `deductAllowance(amount)`), if any.
 */
export type PaymentGateEnv = {
  Variables: { payment: GatePayment | undefined; subscription: ServedSubscription | undefined };
};

/**
 * The gate as Hono middleware; mount it on the paid path prefix. A refused request is answered by the
 * gate and never reaches the handler; a paid one reaches it with `c.get("payment")` set, and the
 * gate's headers (`X-PAYMENT-RESPONSE`) are added to whatever the handler answers. The handler's
 * status is reported to the gate before the response leaves, so a paid request answered 5xx (or whose
 * handler threw) gives the payer its proof back, and an x402 payment is settled only when the handler
 * answered below 400 (a settlement that then fails replaces the handler's answer with a 402 or 5xx).
 *
 * The gate prices the path Hono routes on (its default `getPath`): the request URL's path, read as
 * Hono reads it, so `Host` plays no part. A path that would need normalizing (dot segments, which
 * Hono's router does not remove) or that frameworks read differently is answered 400.
 *
 * @example
 * const app = new Hono<PaymentGateEnv>();
 * app.use("/api/*", honoPaymentGate(gate));
 * app.get("/api/reports/:id", (c) => c.json({ report: c.req.param("id"), paidBy: c.get("payment")?.payer }));
 * app.get("/api/search", (c) => c.json({ subscriber: c.get("subscription")?.subscriber }));
 */
export function honoPaymentGate(gate: PaymentGate): MiddlewareHandler<PaymentGateEnv> {
  return async function honoPaymentGate(c, next) {
    const target = pathAndQueryOf(c.req.raw.url);
    const reading = normalizeRequestTarget(target);
    if (!reading.ok || reading.dotSegments) return targetRefusal(reading);
    const result = await gate({
      method: c.req.raw.method,
      url: reading.target,
      headers: c.req.raw.headers,
      // The socket's peer on @hono/node-server; other runtimes give none (the request then has no client).
      remoteAddress: peerAddressOf(c.env),
    });
    if (result.kind === "respond") return result.response;
    c.set("payment", result.paid);
    c.set("subscription", result.subscription);
    const subscription = result.subscription;
    try {
      // The handler's context carries the subscription for a bare `deductAllowance(amount)`.
      await (subscription === undefined ? next() : runInGateContext({ subscription }, next));
    } catch (error) {
      // Hono turns a handler's error into a response through `onError`; one rethrown here is a 500.
      await result.complete(500);
      throw error;
    }
    // The handler's response has not left yet: a payment settled here (x402) still decides it.
    const instead = await result.complete(c.res.status);
    if (instead instanceof Response) {
      // The settlement failed: nothing of the handler's answer is sent (nor its headers, which
      // Hono's setter would otherwise copy onto the replacement).
      await c.res.body?.cancel().catch(() => undefined);
      c.res = undefined;
      c.res = instead;
      return;
    }
    let response = c.res;
    eachGateHeader(result, (name, value) => {
      try {
        response.headers.set(name, value);
      } catch {
        // A handler may return a Response with immutable headers (e.g. one from `fetch`): copy it.
        c.res = new Response(response.body, response);
        // Hono's setter may copy it again: later headers go to the one it keeps.
        response = c.res;
        response.headers.set(name, value);
      }
    });
  };
}

/**
 * Everything after the authority of a request URL, found as Hono's `getPath` finds the path: from the
 * first `/` after `scheme://`. Hono's Node server may hand over the URL unparsed, so it is read as a
 * string, exactly as the router reads it.
 */
function pathAndQueryOf(url: string): string {
  const start = url.indexOf("/", url.indexOf(":") + 4);
  return start === -1 ? "/" : url.slice(start);
}
