/**
 * When a failed RPC call is tried again, and after how long. A provider's 429 or 5xx, a timeout or a
 * refused connection is a fault of the moment: the call goes again after an exponential wait with
 * jitter (so a fleet of callers refused together does not come back together), or after the wait the
 * provider's `Retry-After` asks for, never longer than a bound. An answer of the node itself (a revert,
 * "nonce too low", a log range it refuses) is not retried here: its caller decides.
 */
import { HttpRequestError, TimeoutError } from "viem";

/** HTTP statuses that say "not now": rate limited, or the provider (or its gateway) failing. */
const TRANSIENT_STATUSES = new Set([408, 425, 429, 500, 502, 503, 504]);

/** Whether `error` (or one of its causes) is a transient fault of the provider, worth another try. */
export function isTransientRpcFault(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e !== null && typeof e === "object" && depth < 8; depth++) {
    if (e instanceof TimeoutError) return true;
    if (e instanceof HttpRequestError) {
      // No status: the request never got an answer (connection refused or reset, DNS).
      return e.status === undefined || TRANSIENT_STATUSES.has(e.status);
    }
    if ((e as { transient?: unknown }).transient === true) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** Milliseconds a `Retry-After` header asks for (seconds, or an HTTP date), if it says. */
export function retryAfterMs(error: unknown, now: number): number | undefined {
  for (let e: unknown = error, depth = 0; e !== null && typeof e === "object" && depth < 8; depth++) {
    const headers = (e as { headers?: unknown }).headers;
    if (headers instanceof Headers) {
      const value = headers.get("retry-after")?.trim();
      if (value !== undefined && value !== "") {
        if (/^\d+(\.\d+)?$/.test(value)) return Math.round(Number(value) * 1000);
        const date = Date.parse(value);
        if (!Number.isNaN(date)) return Math.max(0, date - now);
      }
    }
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

export type BackoffOptions = {
  /** The first wait, doubled on each further attempt. */
  baseMs: number;
  /** No wait is longer, whatever `Retry-After` asks. */
  maxMs: number;
  /** A number in [0, 1). */
  random: () => number;
};

/**
 * The wait before attempt `attempt + 1` (0 after the first failure): `Retry-After` when given (within
 * `maxMs`, plus up to a tenth of it as jitter), else "equal jitter" on `baseMs · 2^attempt`: half of it
 * fixed, half random, so waits keep growing while callers spread out.
 */
export function backoffMs(attempt: number, retryAfter: number | undefined, options: BackoffOptions): number {
  if (retryAfter !== undefined) {
    const asked = Math.min(retryAfter, options.maxMs);
    return Math.min(options.maxMs, Math.round(asked + (asked / 10 + options.baseMs) * options.random()));
  }
  const ceiling = Math.min(options.maxMs, options.baseMs * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling / 2 + (ceiling / 2) * options.random());
}
