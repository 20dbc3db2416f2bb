/**
 * `/healthz`'s checks of the gas key: `fees` (transactions waiting for the chain's fee to fall under the
 * maximum fee: outbox/feeHold.ts) and `gas` (the key's runway: gasRunway.ts). Either not ok makes the
 * answer `degraded`, still HTTP 200: every instance would say the same, and a load balancer that took
 * them all out would stop what still works.
 *
 * What a stranger learns is whether each is ok, and since when; the figures (balance, runway, base fee,
 * maximum fee, rows waiting) go in `details` only to a caller that may read `/metrics`
 * (metricsAccess.ts): a key's balance and spend are the business's, not the network's.
 */
import { formatEther, formatGwei } from "viem";
import type { Health } from "../protocol/facilitator.ts";
import type { GasRunwayState } from "./gasRunway.ts";
import type { FeeHoldState } from "./outbox/feeHold.ts";

export type HealthCheck = NonNullable<Health["checks"]>[string];

/** The `fees` check: not ok while rows wait for the fee to fall under the maximum fee. */
export function feesCheck(
  hold: FeeHoldState | undefined,
  ceiling: bigint | undefined,
  detailed: boolean,
): HealthCheck {
  if (hold === undefined) {
    return detailed && ceiling !== undefined
      ? { ok: true, details: { maxFeeGwei: formatGwei(ceiling) } }
      : { ok: true };
  }
  return {
    ok: false,
    message:
      "transactions wait for the chain's fee to fall under the facilitator's maximum fee (TOLLGATE_MAX_FEE_GWEI); nothing is dropped, and they settle once it does",
    since: hold.since.toISOString(),
    ...(detailed
      ? {
          details: {
            rows: hold.rows,
            baseFeeGwei: hold.baseFee === undefined ? null : formatGwei(hold.baseFee),
            maxFeeGwei: formatGwei(hold.ceiling),
          },
        }
      : {}),
  };
}

/** The `gas` check: not ok while the key runs dry within the warning threshold (or has nothing left). */
export function gasCheck(runway: GasRunwayState | undefined, detailed: boolean): HealthCheck {
  const details = detailed && runway !== undefined ? { details: runwayDetails(runway) } : {};
  if (runway === undefined || !runway.low) return { ok: true, ...details };
  return {
    ok: false,
    message:
      runway.balance === 0n
        ? "the gas key has no balance left: nothing can be sent until it is funded"
        : "the gas key runs dry within the warning threshold (TOLLGATE_GAS_RUNWAY_WARN_HOURS) at its recent spending",
    ...details,
  };
}

function runwayDetails(runway: GasRunwayState): NonNullable<HealthCheck["details"]> {
  return {
    balanceWei: runway.balance.toString(),
    balanceEth: formatEther(runway.balance),
    spentWei: runway.spent.toString(),
    spanSeconds: runway.spanSeconds,
    runwaySeconds: runway.runwaySeconds === undefined ? null : Math.floor(runway.runwaySeconds),
    readAt: runway.readAt.toISOString(),
  };
}
