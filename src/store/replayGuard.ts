import { createHash, randomBytes } from "node:crypto";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";

/**
 * Remembers consumed payment memos so a proof is accepted once (docs/protocol.md, "Payment proof"; docs/gate.md).
 *
 * Contract shared by every implementation:
 * - `consume(key, expiresAtMs)` resolves `true` for exactly one call per key while the key is
 *   remembered, `false` for every other call, however many run concurrently (across processes for
 *   the PostgreSQL and Redis guards). A key it takes is used for good (until `release`).
 * - A key is remembered until `expiresAtMs` (the memo's own expiry, ms since the epoch); after that it
 *   may be forgotten, which is safe because the gate refuses an expired memo before asking.
 * - A key whose `expiresAtMs` has already passed is refused (`false`): the guard could not remember it.
 * - `release(key)` forgets a key taken by `consume`, so that exactly one later `consume` of it succeeds
 *   again (the gate releases a proof whose request was not served). Releasing a key that is not
 *   remembered (never consumed, already released or expired) or that is held by a claim is a no-op.
 *   Only the caller that consumed a key may release it, once; a release racing a consume of the same
 *   key leaves at most one winner.
 * - `close()` releases what the guard opened itself (never a store or client it was given).
 *
 * Claims (optional, implemented by every built-in guard): a key held while its request is served, so
 * that a gate that dies between taking a proof and answering does not use the proof up.
 * - `claim(key, expiresAtMs, { request, leaseMs, maxClaims })` wins (`{ ok: true, token }`) for exactly
 *   one caller, as `consume` does, for a key not remembered: the key is then in flight for `request`
 *   until now + `leaseMs`. A key in flight whose lease has passed is taken over by exactly one claim
 *   for the same `request` (a new token and lease), as long as fewer than `maxClaims` claims took it
 *   (the first included). Every other claim loses: `in-flight` (with the time left on the lease) when
 *   the key is in flight for the same `request` with its lease running, `used` otherwise (a key used by
 *   `consume`, settled, in flight for another request, or out of claims). `consume` never takes a key
 *   in flight, whatever its lease.
 * - `settle(key, expiresAtMs)` marks a key used for good, whoever holds it (the answer was written):
 *   from then on it behaves as a key taken by `consume`. It is idempotent, and takes an absent key too.
 * - `release(key, token)` forgets a key in flight under that token only (the handler failed), so that
 *   one later `claim` or `consume` wins it again; a claim taken over, settled or expired is not
 *   released by its old token.
 * - Leases are judged by the caller's clock (the gate host's), passed in as now; gates sharing a guard
 *   must keep their clocks closer together than a lease.
 */
export type ReplayGuard = {
  consume(key: string, expiresAtMs: number): Promise<boolean>;
  release(key: string, token?: string): Promise<void>;
  claim?(key: string, expiresAtMs: number, claim: ReplayClaimRequest): Promise<ReplayClaim>;
  settle?(key: string, expiresAtMs: number): Promise<void>;
  close?(): Promise<void>;
};

/** What a claim is for and how long it holds (see `ReplayGuard`). */
export type ReplayClaimRequest = {
  /**
   * The request the key pays for: only a claim for the same request may take over an expired lease.
   * Stored hashed; any string.
   */
  request: string;
  /** How long the claim holds before a claim for the same request may take it over (ms, ≥ 1). */
  leaseMs: number;
  /** How many claims the key may have while it is remembered (the first and its takeovers, ≥ 1). */
  maxClaims: number;
};

/** The outcome of `ReplayGuard.claim`. */
export type ReplayClaim =
  | { ok: true; token: string }
  | { ok: false; reason: "used" }
  | { ok: false; reason: "in-flight"; retryAfterMs: number };

/** Checks a claim request; a bad one is a programming error, so it throws. */
export function checkClaimRequest(claim: ReplayClaimRequest): void {
  if (!Number.isSafeInteger(claim.leaseMs) || claim.leaseMs < 1) {
    throw new TollgateError(ErrorCode.Internal, `leaseMs must be a positive integer: ${claim.leaseMs}`);
  }
  if (!Number.isSafeInteger(claim.maxClaims) || claim.maxClaims < 1) {
    throw new TollgateError(ErrorCode.Internal, `maxClaims must be a positive integer: ${claim.maxClaims}`);
  }
}

/** A fresh claim token: 16 random bytes, base64url. */
export function newClaimToken(): string {
  return randomBytes(16).toString("base64url");
}

/** sha256 of a claim's request, hex: what the guards store to compare requests. */
export function claimRequestHash(request: string): string {
  return createHash("sha256").update(request, "utf8").digest("hex");
}

/** sha256 of a replay key: a fixed size to store however long the memo is. */
export function replayKeyHash(key: string): Buffer {
  return createHash("sha256").update(key, "utf8").digest();
}
