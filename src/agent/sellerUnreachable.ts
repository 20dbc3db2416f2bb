/**
 * A seller's server that does not answer, as a typed error: `SellerUnreachable` with the reason a
 * model or a person can act on, instead of undici's bare `TypeError: fetch failed` (which paid tools
 * used to report as `Internal`).
 *
 * Only requests to the seller go through `reachSeller`: the facilitator client maps its own network
 * failures (`ChainUnavailable`, reason `facilitator_unreachable`), so a `SellerUnreachable` always
 * means the seller's host, never the payment path.
 */
import type { FetchFn } from "../http/facilitatorClient.ts";
import { TollgateError } from "../protocol/errors.ts";

/** Why a seller did not answer (`details.reason` of `SellerUnreachable`). */
export type SellerUnreachableReason =
  | "connection_refused"
  | "connection_reset"
  | "host_not_found"
  | "timeout"
  | "tls"
  | "network";

/** Node/undici error codes, by what they mean for a caller. */
const REASON_BY_CODE: Record<string, SellerUnreachableReason> = {
  ECONNREFUSED: "connection_refused",
  ECONNRESET: "connection_reset",
  EPIPE: "connection_reset",
  UND_ERR_SOCKET: "connection_reset",
  UND_ERR_CLOSED: "connection_reset",
  ENOTFOUND: "host_not_found",
  EAI_AGAIN: "host_not_found",
  ETIMEDOUT: "timeout",
  UND_ERR_CONNECT_TIMEOUT: "timeout",
  UND_ERR_HEADERS_TIMEOUT: "timeout",
  UND_ERR_BODY_TIMEOUT: "timeout",
  EHOSTUNREACH: "network",
  ENETUNREACH: "network",
  ENETDOWN: "network",
  EHOSTDOWN: "network",
  CERT_HAS_EXPIRED: "tls",
  DEPTH_ZERO_SELF_SIGNED_CERT: "tls",
  ERR_TLS_CERT_ALTNAME_INVALID: "tls",
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: "tls",
  SELF_SIGNED_CERT_IN_CHAIN: "tls",
};

const MESSAGE_BY_REASON: Record<SellerUnreachableReason, string> = {
  connection_refused: "refused the connection",
  connection_reset: "closed the connection",
  host_not_found: "has a host name that does not resolve",
  timeout: "did not answer in time",
  tls: "presented a TLS certificate that does not verify",
  network: "cannot be reached over the network",
};

/**
 * The reason a `fetch` failure is a failure to reach its server, or `undefined` when it is something
 * else (a caller's abort, a bad request object, a bug), which stays as it is.
 */
export function unreachableReason(error: unknown): SellerUnreachableReason | undefined {
  if (error instanceof TollgateError) return undefined;
  if (!(error instanceof Error)) return undefined;
  // AbortSignal.timeout() aborts with a TimeoutError; a plain AbortError is the caller's own cancel.
  if (error.name === "TimeoutError") return "timeout";
  // undici: TypeError("fetch failed") whose cause (possibly an AggregateError) carries the code.
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 4; depth++) {
    const code = (cause as NodeJS.ErrnoException).code;
    if (typeof code === "string" && REASON_BY_CODE[code] !== undefined) return REASON_BY_CODE[code];
    const nested = cause instanceof AggregateError ? cause.errors[0] : cause.cause;
    if (nested === undefined && cause.name === "TypeError" && cause.message === "fetch failed") {
      return "network";
    }
    cause = nested;
  }
  if (error.name === "TypeError" && error.message === "fetch failed") return "network";
  return undefined;
}

/** `SellerUnreachable` for a request to `url` that failed with `error`, or `undefined` (see above). */
export function sellerUnreachableError(error: unknown, url: string): TollgateError | undefined {
  const reason = unreachableReason(error);
  if (reason === undefined) return undefined;
  const origin = originOf(url);
  return new TollgateError("SellerUnreachable", `the seller at ${origin} ${MESSAGE_BY_REASON[reason]}`, {
    details: { reason, url: origin },
    cause: error,
  });
}

/**
 * Wraps the `fetch` that reaches a seller so that a server that does not answer throws
 * `SellerUnreachable`; every other outcome (any HTTP status, a caller's abort) passes through.
 *
 * @example
 * const paidFetch = fetchWithPayment(reachSeller(fetch), payer, options);
 */
export function reachSeller(fetch: FetchFn): FetchFn {
  return async function reachSeller(input, init) {
    try {
      return await fetch(input, init);
    } catch (error) {
      const url = input instanceof Request ? input.url : String(input);
      throw sellerUnreachableError(error, url) ?? error;
    }
  };
}

/** Scheme, host and port only: a capability URL's path and query may carry a buyer's data. */
function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return "(invalid URL)";
  }
}
