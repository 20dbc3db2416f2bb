import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import { sqlErrorCode } from "./sqlErrorCode.ts";

/** A `tx` handle kept and used after its transaction committed or rolled back. */
export function transactionEndedError(): TollgateError {
  return new TollgateError(ErrorCode.Internal, "transaction handle used after its transaction ended");
}

export function noSchemaError(): TollgateError {
  return new TollgateError(ErrorCode.Internal, "dropSchema() needs a store opened with a schema");
}

/** SQLSTATE classes and codes that mean the database went away, not that the query was wrong. */
const UNAVAILABLE_SQLSTATES = new Set(["57P01", "57P02", "57P03", "53300", "40001", "40P01"]);
/** Socket errors of a connection to PostgreSQL or Redis that was cut or never made. */
const SOCKET_CODES = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);
/** node-redis errors of a client whose connection is down (matched by class name: no import of the client). */
const REDIS_DOWN = new Set([
  "ClientClosedError",
  "ClientOfflineError",
  "ConnectionTimeoutError",
  "SocketClosedUnexpectedlyError",
  "SocketTimeoutError",
  "ReconnectStrategyError",
]);
/** node-postgres's messages for a connection it lost (it sets no code on them). */
const PG_LOST =
  /^(Connection terminated|Client has encountered a connection error|Connection timeout|timeout exceeded when trying to connect)/;

/**
 * Whether `error` (or one of its causes) says a store or cache dependency is down or was cut for a
 * moment — a PostgreSQL backend terminated or refusing connections, a serialization retry exhausted,
 * a Redis client offline — rather than a fault of the request or of our code. Such a request may
 * succeed when sent again, so it is answered 503 with Retry-After, never a 500.
 */
export function isStoreUnavailable(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e !== null && typeof e === "object" && depth < 5; depth++) {
    const sqlState = sqlErrorCode(e);
    if (sqlState !== undefined && (sqlState.startsWith("08") || UNAVAILABLE_SQLSTATES.has(sqlState)))
      return true;
    const { code, name, message } = e as { code?: unknown; name?: unknown; message?: unknown };
    if (typeof code === "string" && SOCKET_CODES.has(code)) return true;
    const kind = (e as { constructor?: { name?: unknown } }).constructor?.name;
    if (
      (typeof name === "string" && REDIS_DOWN.has(name)) ||
      (typeof kind === "string" && REDIS_DOWN.has(kind))
    )
      return true;
    if (typeof message === "string" && PG_LOST.test(message)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** The 503 a store outage is answered with (`ChainUnavailable`, the code for "a dependency is down"). */
export function storeUnavailableError(cause: unknown): TollgateError {
  return new TollgateError(
    ErrorCode.ChainUnavailable,
    "a store Tollgate depends on is unavailable; try again",
    {
      details: { reason: "store_unavailable" },
      retryAfter: 2,
      cause,
    },
  );
}
