/**
 * The gate's non-402 answers: the error body of docs/protocol.md, "Errors", and the answer to a check that could
 * not be carried out. Shared by the dispatcher (`paymentGate`) and the schemes' gate parts.
 */
import { type ErrorCode, httpStatusOf, TollgateError } from "../protocol/errors.ts";
import { HeaderName } from "../protocol/header.ts";
import { isStoreUnavailable, storeUnavailableError } from "../store/storeErrors.ts";

/** The error body of docs/protocol.md, "Errors". */
export function errorResponse(
  code: ErrorCode,
  message: string,
  status: number,
  retryAfter?: number,
): Response {
  const headers: Record<string, string> = { "content-type": "application/json", "cache-control": "no-store" };
  if (retryAfter !== undefined) headers[HeaderName.RetryAfter] = String(retryAfter);
  return new Response(JSON.stringify({ error: { code, message } }), { status, headers });
}

/**
 * A check that could not be carried out. Unavailability (the facilitator's, or the gate's own store or
 * cache cut for a moment) and rate limits are passed on with their `Retry-After` (the payer retries the
 * same proof later); anything else is the gate's own fault, reported without internals.
 */
export function faultResponse(
  error: unknown,
  internalMessage = "the payment could not be checked; try the same proof again later",
): Response {
  if (error instanceof TollgateError && (error.code === "ChainUnavailable" || error.code === "RateLimited")) {
    return errorResponse(error.code, error.message, httpStatusOf(error.code), error.retryAfter ?? 5);
  }
  // The gate's own store or cache (replay guard, usage ledger, voucher store) cut for a moment.
  if (isStoreUnavailable(error)) {
    const outage = storeUnavailableError(error);
    return errorResponse(outage.code, outage.message, httpStatusOf(outage.code), outage.retryAfter ?? 2);
  }
  return errorResponse("Internal", internalMessage, 500);
}

/** A gate misconfiguration found on first use (a plan that is not the gate's), as opposed to a fault. */
export function misconfigured(message: string): TollgateError {
  return new TollgateError("InvalidRequest", `paymentGate subscription pricing: ${message}`, {
    details: { reason: "gate_misconfigured" },
  });
}

function isMisconfiguration(error: unknown): boolean {
  return (
    error instanceof TollgateError &&
    error.code === "InvalidRequest" &&
    error.details?.reason === "gate_misconfigured"
  );
}

/**
 * Logs a failed check and answers it: a misconfiguration as 500 with its message (the operator must
 * see it), a fault as 5xx without internals.
 */
export function checkFailureResponse(
  fault: unknown,
  what: string,
  logger: { warn(o: object, m?: string): void; error(o: object, m?: string): void } | undefined,
): Response {
  if (isMisconfiguration(fault)) {
    logger?.error({ err: fault }, "paymentGate is misconfigured");
    return errorResponse("Internal", (fault as TollgateError).message, 500);
  }
  logger?.warn({ err: fault }, what);
  return faultResponse(fault, `${what}; try again later`);
}
