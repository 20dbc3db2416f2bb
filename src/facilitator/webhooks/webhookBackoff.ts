/**
 * When a failed webhook delivery is tried again: exponential backoff with jitter, so that receivers
 * coming back after an outage are not hit by every queued delivery in the same second.
 */

export type WebhookRetryPolicy = {
  /** Delay after the first failed attempt, before jitter. */
  baseMs: number;
  /** Largest delay between two attempts, before jitter. */
  capMs: number;
  /** Attempts after which a delivery is a dead letter (the first attempt counts). */
  maxAttempts: number;
  /** Fraction of each delay that is random: the delay is drawn from ((1 - jitter) · d, d]. */
  jitter: number;
};

/**
 * 30 s doubling to a 6 h cap, 16 attempts: a receiver that is down for up to about a day and a half
 * still gets every event once it is back.
 */
export const defaultWebhookRetryPolicy: WebhookRetryPolicy = {
  baseMs: 30_000,
  capMs: 6 * 3_600_000,
  maxAttempts: 16,
  jitter: 0.5,
};

/** Checks a policy once, where it is configured. */
export function assertWebhookRetryPolicy(policy: WebhookRetryPolicy): void {
  const { baseMs, capMs, maxAttempts, jitter } = policy;
  if (!Number.isSafeInteger(baseMs) || baseMs < 1)
    throw new TypeError("retry baseMs must be a positive integer");
  if (!Number.isSafeInteger(capMs) || capMs < baseMs)
    throw new TypeError("retry capMs must be an integer >= baseMs");
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) {
    throw new TypeError("retry maxAttempts must be a positive integer");
  }
  if (!(jitter >= 0 && jitter <= 1)) throw new TypeError("retry jitter must be between 0 and 1");
}

/**
 * Milliseconds to wait after the `failedAttempts`-th failed attempt (1 for the first):
 * d = min(cap, base · 2^(failedAttempts − 1)), less a random share of up to `jitter` · d.
 * `random` returns a number in [0, 1), like `Math.random`.
 */
export function webhookBackoff(
  failedAttempts: number,
  policy: WebhookRetryPolicy,
  random: () => number,
): number {
  const exponent = Math.max(0, failedAttempts - 1);
  // 2^exponent overflows to Infinity long after it passes any cap; min() keeps the result finite.
  const delay = Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(exponent, 1023));
  const r = Math.min(Math.max(random(), 0), 1);
  return Math.max(1, Math.round(delay * (1 - policy.jitter * r)));
}
