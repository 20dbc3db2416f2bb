/**
 * The default minimum payment (docs/facilitator.md, "Abuse: minimum amount and rate limits"): a payment must be worth more than the gas the
 * facilitator spends to settle it, or anyone can make the facilitator burn its gas account for
 * nothing.
 *
 * The arithmetic for USDC on Base (docs/facilitator.md, "Minimum amount"): a payment settled alone
 * costs about 80 000 gas (21 000 for the transaction, ~47 000 for the item, the rest BatchSettler's
 * overhead; see docs/contracts.md for the measured figures), ~47 000 when it shares a batch. At an L2
 * gas price of 0.01 gwei and ETH at 4 000 USD that is 80 000 × 0.01 gwei = 8 × 10⁻⁷ ETH ≈ 0.0032 USD,
 * plus an L1 data fee well under 0.001 USD for ~300 bytes of calldata. 0.01 USDC (10 000 in the
 * smallest unit) is about three times a lone settlement and five times a batched one. It is a floor:
 * when gas gets dearer the minimum rises above it by itself (settlementFeeFloor.ts).
 *
 * On a devnet gas is free, so the default is 1 (the smallest payment that moves money): the demo and
 * the examples price requests at fractions of a cent. A zero-value payment is refused everywhere.
 */
import { getNetworkConfig } from "../../chain/networks.ts";

/** 0.01 of a token of `decimals` decimals (10 000 for USDC), or 1 on a devnet. */
export function defaultMinAmount(network: string, decimals: number): bigint {
  if (getNetworkConfig(network)?.isDevnet === true) return 1n;
  return decimals >= 2 ? 10n ** BigInt(decimals - 2) : 1n;
}
