import type { RequestHandler } from "express";
import { nodeHeaderReader, writeWebResponse } from "./nodeBridge.ts";
import type { PaymentGate } from "./paymentGate.ts";

/**
 * The gate as Express middleware; mount it on the paid path prefix. Routes are matched against the
 * full path (`req.originalUrl`), so `app.use("/api", expressPaymentGate(gate))` prices
 * `"GET /api/reports/:id"`. A paid request reaches the next handler with `res.locals.payment` set and
 * `X-PAYMENT-RESPONSE` already on the response. The status the response ends with (500 for a handler
 * that threw, through Express's error handling) is reported to the gate when it is sent, so a paid
 * request answered 5xx gives the payer its proof back. Express is not a runtime dependency: only its
 * types are used.
 *
 * @example
 * app.use("/api", expressPaymentGate(gate));
 * app.get("/api/reports/:id", (req, res) => res.json({ paidBy: res.locals.payment?.payer }));
 */
export function expressPaymentGate(gate: PaymentGate): RequestHandler {
  return function expressPaymentGate(req, res, next) {
    // `req.protocol` honours Express's "trust proxy" setting; the host header is what the client used.
    const url = `${req.protocol}://${req.headers.host ?? "localhost"}${req.originalUrl}`;
    gate({ method: req.method, url, headers: nodeHeaderReader(req.headers) })
      .then(async (result) => {
        if (result.kind === "respond") return writeWebResponse(res, result.response);
        res.locals.payment = result.paid;
        for (const [name, value] of result.headers) res.setHeader(name, value);
        // `close` follows `finish` and also fires for an aborted response; the gate counts the first.
        res.once("close", () => void result.complete(res.statusCode));
        next();
      })
      .catch(next);
  };
}
