import type { RequestHandler } from "express";
import { runInGateContext } from "./gateContext.ts";
import { nodeHeaderReader, reportToGate, writeWebResponse } from "./nodeBridge.ts";
import { normalizeRequestTarget, targetRefusal } from "./normalizeRequestTarget.ts";
import type { PaymentGate } from "./paymentGate.ts";

/**
 * The gate as Express middleware; mount it on the paid path prefix. Routes are matched against the
 * full path (`req.originalUrl`), so `app.use("/api", expressPaymentGate(gate))` prices
 * `"GET /api/reports/:id"`. A paid request reaches the next handler with `res.locals.payment` set (a
 * subscribed one with `res.locals.subscription`: id, plan, subscriber, units and overage charged,
 * `deductAllowance(amount)`) and
 * `X-PAYMENT-RESPONSE` already on the response. The status the response ends with (500 for a handler
 * that threw, through Express's error handling) is reported to the gate when it is sent, so a paid
 * request answered 5xx gives the payer its proof back. An x402 payment is settled after the handler,
 * as x402's own middleware does: its response is held in memory until it ends, the payment settled
 * when it is below 400, and only then sent with `PAYMENT-RESPONSE` (or replaced by a 402 or 5xx when
 * the settlement failed). Express is not a runtime dependency: only its types are used.
 *
 * The route is priced from the request target's path, which is what Express routes on; `Host` plays
 * no part. Express does not remove dot segments (`/api/reports/..` reaches `/api/reports/:id`), so a
 * target with dot segments, or one Express would read differently, is answered 400.
 *
 * @example
 * app.use("/api", expressPaymentGate(gate));
 * app.get("/api/reports/:id", (req, res) => res.json({ paidBy: res.locals.payment?.payer }));
 */
export function expressPaymentGate(gate: PaymentGate): RequestHandler {
  return function expressPaymentGate(req, res, next) {
    // Express routes on the path of the target as sent (an absolute-form target reduced to its path,
    // dot segments kept as they are): price exactly that path, never one built from `Host`. A target
    // the gate would have to normalize, or that Express reads differently, is refused rather than
    // priced as something else.
    const reading = normalizeRequestTarget(req.originalUrl);
    if (!reading.ok || reading.dotSegments || !isRoutedPath(`${req.baseUrl}${req.path}`, reading.path)) {
      writeWebResponse(res, targetRefusal(reading)).catch(next);
      return;
    }
    gate({
      method: req.method,
      url: reading.target,
      headers: nodeHeaderReader(req.headers),
      // The socket's peer, never Express's `req.ip` (which reads X-Forwarded-For under `trust proxy`).
      remoteAddress: req.socket.remoteAddress,
    })
      .then(async (result) => {
        if (result.kind === "respond") return writeWebResponse(res, result.response);
        res.locals.payment = result.paid;
        res.locals.subscription = result.subscription;
        reportToGate(res, result, next);
        const subscription = result.subscription;
        // The handler's context carries the subscription for a bare `deductAllowance(amount)`.
        if (subscription === undefined) next();
        else runInGateContext({ subscription }, next);
      })
      .catch(next);
  };
}

/**
 * Whether Express's own view of the path (mount path and the rest, `req.baseUrl + req.path`) is the
 * path the gate read. Express adds a "/" to a request for exactly the mount path (`/api` → `/api/`).
 */
function isRoutedPath(routed: string, path: string): boolean {
  return routed === path || routed === `${path}/`;
}
