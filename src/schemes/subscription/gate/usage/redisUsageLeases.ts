/**
 * Uses and leases in the Redis usage ledger (usageLeases.ts gives the rules): a direct use and a grant
 * read a snapshot, apply the rule and commit with a compare-and-set, retrying a lost race; spends into
 * leases are one script for every use in flight; a lease ends with a compare-and-set on its cycle, the
 * ledger's unsettled figure and its spent units.
 */

import {
  bounded,
  commit,
  contended,
  cycleArgs,
  MAX_CAS_ATTEMPTS,
  type RedisLedger,
  snapshot,
  snapshotOf,
  text,
} from "./redisLedger.ts";
import { END_LUA, EXPIRED_LUA, READ_LEASE_LUA, SPEND_LUA } from "./redisUsageScripts.ts";
import {
  applyDirectUsage,
  endLease,
  firstUseOf,
  grantSize,
  type LeaseAcquisition,
  type LeaseSpend,
  type StoredLease,
} from "./usageLeases.ts";
import type { Reservation, UsageRequest } from "./usageLedger.ts";

/** A use spent straight through the ledger (no lease). */
export async function reserveRedisUse(ledger: RedisLedger, raw: UsageRequest): Promise<Reservation> {
  const request = bounded(raw);
  for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
    const seen = await snapshot(ledger, request.subscriptionId);
    const result = applyDirectUsage(seen.cycle, BigInt(seen.unsettled), request);
    if (result.cycle === undefined) return result.reservation;
    if (await commit(ledger, request.subscriptionId, seen, result.cycle, result.unsettled))
      return result.reservation;
  }
  throw contended();
}

/**
 * Grants a lease of up to `want` units whose first use is `raw`; spends `raw` directly when the room
 * left is too small for a lease.
 */
export async function acquireRedisLease(
  ledger: RedisLedger,
  raw: UsageRequest,
  want: number,
  ttlMs: number,
): Promise<LeaseAcquisition> {
  const request = bounded(raw);
  for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
    const seen = await snapshot(ledger, request.subscriptionId);
    const unsettled = BigInt(seen.unsettled);
    const granted = grantSize(seen.cycle, unsettled, request, BigInt(want));
    if (granted === undefined) {
      const direct = applyDirectUsage(seen.cycle, unsettled, request);
      if (direct.cycle === undefined) return { lease: undefined, reservation: direct.reservation };
      if (await commit(ledger, request.subscriptionId, seen, direct.cycle, direct.unsettled)) {
        return { lease: undefined, reservation: direct.reservation };
      }
      continue;
    }
    const { cycle, grant } = granted;
    const units = BigInt(request.units);
    const id = await commit(ledger, request.subscriptionId, seen, cycle, unsettled + grant.worst, {
      ttlMs,
      units: grant.units,
      spent: units,
      base: grant.base,
      inc: grant.includedUnits,
      price: grant.unitPrice,
      worst: grant.worst,
    });
    if (typeof id !== "string") continue;
    const lease: StoredLease = {
      ...grant,
      id,
      subscriptionId: request.subscriptionId,
      epoch: cycle.epoch,
      spent: units,
    };
    return { lease, reservation: firstUseOf(grant, units) };
  }
  throw contended();
}

/** Persists uses into live leases in one script; answers the ids of the leases that took them. */
export async function spendRedisLeases(
  ledger: RedisLedger,
  spends: readonly LeaseSpend[],
): Promise<Set<string>> {
  if (spends.length === 0) return new Set();
  const args = [`${ledger.p}l:`];
  for (const s of spends) args.push(s.leaseId, s.units.toString());
  const taken = (await ledger.run(SPEND_LUA, [ledger.leasesKey], args)) as unknown[];
  return new Set(taken.map(text));
}

/** Ends up to `limit` leases past their expiry by Redis's clock; answers how many ended. */
export async function reclaimExpiredRedisLeases(ledger: RedisLedger, limit: number): Promise<number> {
  const expired = (await ledger.run(EXPIRED_LUA, [ledger.leasesKey], [String(limit)])) as unknown[];
  let reclaimed = 0;
  for (const id of expired) if (await endRedisLease(ledger, text(id), "reclaimed")) reclaimed++;
  return reclaimed;
}

/** Ends one lease with a compare-and-set; false when it is not active (or not yet expired). */
export async function endRedisLease(
  ledger: RedisLedger,
  leaseId: string,
  state: "returned" | "reclaimed",
): Promise<boolean> {
  const { p, ledgerKey } = ledger;
  for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
    const reply = (await ledger.run(
      READ_LEASE_LUA,
      [`${p}l:${leaseId}`],
      [`${p}c:`, ledgerKey],
    )) as unknown[];
    if (reply.length === 0) return false;
    const [l, fields, u] = reply as [unknown[], unknown[], unknown];
    const [, sub, epoch, units, spent, base, inc, price, worst] = l.map(text);
    const seen = snapshotOf(fields, u);
    const ended = endLease(
      seen.cycle,
      BigInt(seen.unsettled),
      {
        epoch: Number(epoch),
        units: BigInt(units ?? "0"),
        base: BigInt(base ?? "0"),
        includedUnits: BigInt(inc ?? "0"),
        unitPrice: BigInt(price ?? "0"),
        worst: BigInt(worst ?? "0"),
      },
      BigInt(spent ?? "0"),
    );
    const c = ended.cycle;
    const result = Number(
      await ledger.run(
        END_LUA,
        [ledger.cycleKey(sub ?? ""), ledgerKey, ledger.pendingKey, `${p}l:${leaseId}`, ledger.leasesKey],
        [
          seen.version,
          seen.unsettled,
          spent ?? "0",
          state === "reclaimed" ? "1" : "0",
          state,
          sub ?? "",
          leaseId,
          ended.unsettled.toString(),
          c === undefined ? "0" : "1",
          ...(c === undefined ? [] : cycleArgs(c)),
        ],
      ),
    );
    if (result === 1) return true;
    if (result === 2 || result === 3) return false;
  }
  throw contended();
}
