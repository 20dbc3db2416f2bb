/**
 * What a metered call served under a subscription cost the agent (docs/budgets.md, "How a paid tool
 * spends"). The gate states it in `X-Tollgate-Units` and `X-Tollgate-Overage` (docs/protocol.md); the
 * seller is not trusted with the agent's ledger, so the paid tool records the larger of what the gate
 * states and what its own count gives at the listed units per call.
 *
 * Invariant: the recorded charge is never below the overage of the listed units per call past the
 * included units on the tool's own count, nor below a consistent stated charge, and never above the
 * larger of the two. A charge
 * recorded above what the chain later deducts stays recorded (the ledger keeps the larger of the two
 * per subscription); one recorded below is topped up by the watcher from the chain's events.
 */

import { HeaderName } from "../../../protocol/header.ts";
import type { ManifestPricing } from "../../../protocol/manifest.ts";

/** What the gate stated for one request; absent when its headers are missing or do not add up. */
export type StatedCharge = { units: number; charge: bigint };

/** Largest unit count a header may state (a route's units are a safe integer; this bounds the work). */
const MAX_UNITS = 1_000_000_000;

/**
 * Reads `X-Tollgate-Units` and `X-Tollgate-Overage`. Undefined when either is missing or malformed,
 * or when the charge cannot be what the plan charges for those units (not a whole number of units'
 * overage, or more than every unit's): a seller's inconsistent statement is ignored, not trusted.
 */
export function readStatedCharge(
  headers: Headers,
  plan: { overageUnitPrice: bigint },
): StatedCharge | undefined {
  const unitsText = headers.get(HeaderName.Units)?.trim();
  const chargeText = headers.get(HeaderName.OverageCharge)?.trim();
  if (unitsText === undefined || chargeText === undefined) return undefined;
  if (!/^[0-9]{1,10}$/.test(unitsText) || !/^[0-9]{1,40}$/.test(chargeText)) return undefined;
  const units = Number(unitsText);
  const charge = BigInt(chargeText);
  if (units > MAX_UNITS) return undefined;
  const price = plan.overageUnitPrice;
  if (price === 0n) return charge === 0n ? { units, charge } : undefined;
  if (charge % price !== 0n || charge > price * BigInt(units)) return undefined;
  return { units, charge };
}

/**
 * Units one call of a held plan draws as the seller listed them: the metered entry's `unitsPerCall`
 * for the plan, else 1 (a flat plan, or a tool built without a listing).
 */
export function listedUnitsPerCall(
  listing: { pricing: readonly ManifestPricing[] } | undefined,
  planId: string,
): number {
  const entry = listing?.pricing.find((p) => p.type === "metered" && p.planId === planId);
  return entry?.type === "metered" ? entry.unitsPerCall : 1;
}

/**
 * The charge to record for one call: the larger of the gate's consistent statement and the tool's own
 * floor, the overage of the listed units on its count (`count(units)` adds units to the meter's
 * period and returns their overage). Stated units beyond the listed ones are counted too, so the
 * meter stays level with the gate for later calls, but they are charged only as the gate states:
 * a seller naming a huge unit count cannot make the tool record more than its own statement, or
 * than the listed units of each later call.
 */
export function meteredCharge(
  stated: StatedCharge | undefined,
  listedUnits: number,
  count: (units: number) => bigint,
): { units: number; charge: bigint; source: "gate" | "listing" } {
  const floor = count(listedUnits);
  if (stated !== undefined && stated.units > listedUnits) count(stated.units - listedUnits);
  const units = stated === undefined ? listedUnits : Math.max(stated.units, listedUnits);
  if (stated !== undefined && stated.charge >= floor) return { units, charge: stated.charge, source: "gate" };
  return { units, charge: floor, source: "listing" };
}
