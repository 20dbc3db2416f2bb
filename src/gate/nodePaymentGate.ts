import type { IncomingMessage, ServerResponse } from "node:http";
import type { ServedSubscription } from "../schemes/types.ts";
import { runInGateContext } from "./gateContext.ts";
import { nodeHeaderReader, reportToGate, writeWebResponse } from "./nodeBridge.ts";
import { normalizeRequestTarget, targetRefusal } from "./normalizeRequestTarget.ts";
import type { GatePayment, PaymentGate } from "./paymentGate.ts";

/**
 * A `node:http` handler behind the gate: `payment` is the accepted one-time payment, if any;
 * `subscription` the subscription the request was served under (id, plan, subscriber, units and
 * overage charged, `deductAllowance(amount)`), if any.
 */
export type NodeGatedHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  payment: GatePayment | undefined,
  subscription: ServedSubscription | undefined,
) => void | Promise<void>;

export type NodePaymentGateOptions = {
  /**
   * Only paths equal to the prefix or under it (`/api`, `/api/…`) go through the gate (default `/`),
   * compared ignoring letter case, on the path as sent and decoded once (so `/API/x` and `/%61pi/x`
   * are gated too).
   */
  prefix?: string;
  /** Told of an error thrown by the handler or the gate (the client gets a bare 500). */
  onError?: (error: unknown) => void;
};

/**
 * The gate as a `node:http` request listener wrapping `handler`. Requests outside `prefix` go straight
 * to the handler; others are answered by the gate or reach the handler with the payment as its third
 * argument, the subscription as its fourth, and `X-PAYMENT-RESPONSE` already set on `res`. A handler that throws before answering gets
 * a bare 500 (its error is not sent to the client). The handler's status is reported to the gate (500
 * when it threw, before that 500 is sent), so a paid request answered 5xx gives the payer its proof back.
 * An x402 payment is settled after the handler: its response is held in memory until it ends, the
 * payment settled when it is below 400, and only then sent with `PAYMENT-RESPONSE` (or replaced by a
 * 402 or 5xx when the settlement failed).
 *
 * Every request's target is read once (`normalizeRequestTarget`) and `req.url` is set to the result
 * before the handler runs: origin-form (an absolute-form target reduced to its path), dot segments
 * removed. The handler therefore routes on the very path the gate priced. A target that cannot be read
 * safely (a fragment, a backslash, an encoded slash, `*`) is answered 400 and reaches no handler.
 *
 * @example
 * http.createServer(nodePaymentGate(gate, (req, res, payment) => {
 *   res.end(JSON.stringify({ paidBy: payment?.payer }));
 * }, { prefix: "/api" })).listen(8080);
 */
export function nodePaymentGate(
  gate: PaymentGate,
  handler: NodeGatedHandler,
  options: NodePaymentGateOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  const prefix = (options.prefix ?? "/").replace(/\/+$/, "");
  if (prefix !== "" && !prefix.startsWith("/")) {
    throw new TypeError(`nodePaymentGate: prefix must start with /, got ${JSON.stringify(options.prefix)}`);
  }
  const lowerPrefix = prefix.toLowerCase();
  /** Whether a path is the prefix or under it, in any letter case, as sent or decoded: errs on charging. */
  const covers = (...paths: string[]) =>
    lowerPrefix === "" ||
    paths.some((path) => {
      const lower = path.toLowerCase();
      return lower === lowerPrefix || lower.startsWith(`${lowerPrefix}/`);
    });

  return function nodePaymentGate(req, res) {
    const run = async () => {
      const reading = normalizeRequestTarget(req.url ?? "/");
      if (!reading.ok) return writeWebResponse(res, targetRefusal(reading));
      // The handler sees the target the gate read (origin-form, dot segments removed), so the two
      // cannot route one request differently; `Host` is never read.
      req.url = reading.target;
      if (!covers(reading.path, reading.routePath)) return handler(req, res, undefined, undefined);
      const result = await gate({
        method: req.method ?? "GET",
        url: reading.target,
        headers: nodeHeaderReader(req.headers),
        remoteAddress: req.socket.remoteAddress,
      });
      if (result.kind === "respond") return writeWebResponse(res, result.response);
      reportToGate(res, result, (error) => {
        options.onError?.(error);
        if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
        res.end();
      });
      try {
        const subscription = result.subscription;
        // The handler's context carries the subscription for a bare `deductAllowance(amount)`.
        return await (subscription === undefined
          ? handler(req, res, result.paid, undefined)
          : runInGateContext({ subscription }, () => handler(req, res, result.paid, subscription)));
      } catch (error) {
        // Hand the proof back before the 500 leaves, so an immediate retry finds it released.
        if (!res.headersSent) await result.complete(500);
        throw error;
      }
    };
    run().catch((error: unknown) => {
      options.onError?.(error);
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
      res.end();
    });
  };
}
