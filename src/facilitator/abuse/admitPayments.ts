/**
 * Admission in front of the settlement engine (docs/facilitator.md, "Abuse: minimum amount and rate limits"): every payment that would cost
 * a chain read or gas — `/authorize`, `/x402/verify`, `/x402/settle` — first passes the off-chain
 * checks (minimum amount, memo expiry, window, signature), then the cost of settling it at the network's
 * fee (settlementFeeFloor.ts: at most one chain read per few seconds, shared by every payment), and only
 * then takes a token of its payer's rate-limit bucket, so a refused payment costs its payer nothing. The engine checks again (it is also used without this wrapper); the recovered
 * signer is cached in `checkSignedPayment`, so the second check costs no second recovery.
 */

import type { RateLimits } from "../../http/rateLimits.ts";
import type { Clock } from "../../protocol/clock.ts";
import { unixSeconds } from "../../protocol/clock.ts";
import {
  type CheckablePayment,
  checkSignedPayment,
  type SupportedTokenConfig,
} from "../checkSignedPayment.ts";
import type { ContractSigners } from "../contractSigners.ts";
import type { SettlementEngine } from "../settlementEngine.ts";
import { SETTLE_AFTER_VERIFY_GRACE_MS, type SettlementFeeFloor } from "./settlementFeeFloor.ts";

/** Seconds an authorization and a memo must have left on arrival (the engine's own margin). */
export const SETTLEMENT_MARGIN_SECONDS = 6;

export function admitPayments(
  engine: SettlementEngine,
  options: {
    network: string;
    tokens: ReadonlyMap<string, SupportedTokenConfig>;
    clock: Clock;
    limits: Pick<RateLimits, "takePayer">;
    /** Wallet payers' signatures, checked through the chain (contractSigners.ts). */
    contractSigners?: ContractSigners | undefined;
    /** The minimum that follows the network's fee; without it only the configured minimum holds. */
    feeFloor?: SettlementFeeFloor | undefined;
  },
): SettlementEngine {
  /** `graceMs`: x402's settle, whose verify admitted the payment before the gate served it. */
  const admit = async (payment: CheckablePayment, graceMs?: number): Promise<void> => {
    const payer = await checkSignedPayment(
      {
        network: options.network,
        tokens: options.tokens,
        nowSeconds: unixSeconds(options.clock),
        minRemainingSeconds: SETTLEMENT_MARGIN_SECONDS,
        contractSigners: options.contractSigners,
      },
      payment,
    );
    const floor = options.feeFloor;
    if (floor !== undefined) {
      await floor.refresh();
      floor.assertCovers(payment.token, BigInt(payment.authorization.value), { graceMs });
    }
    options.limits.takePayer(payer);
  };
  return {
    ...engine,
    async authorize(payment) {
      await admit(payment);
      return engine.authorize(payment);
    },
    async settleAuthorization(payment) {
      await admit(payment, SETTLE_AFTER_VERIFY_GRACE_MS);
      return engine.settleAuthorization(payment);
    },
    async preflight(payment, preflightOptions) {
      await admit(payment, preflightOptions?.forSettle === true ? SETTLE_AFTER_VERIFY_GRACE_MS : undefined);
      return engine.preflight(payment);
    },
  };
}
