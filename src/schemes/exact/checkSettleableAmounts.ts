/**
 * Whether a facilitator settles a gate's one-time prices at all. A facilitator refuses every payment
 * below its token's minimum (`GET /supported` publishes `minAmount`: 0.01 USDC by default on Base and
 * Base Sepolia, 1 unit on a devnet), so a route priced under it answers 402s nobody can pay: a price that
 * worked on a devnet fails on a real network only when the first buyer tries. `gate.ready()` asks this
 * at start-up instead.
 *
 * A facilitator whose minimum follows the network's fee publishes the configured part apart
 * (`minAmountFloor`): only a price under that is a mistake of the gate's. A price above it but under the
 * `minAmount` of the moment is refused only while the fee stays high, so it is returned, not thrown: a
 * gate that starts during a fee spike starts, and its payers get the facilitator's refusal, naming the
 * minimum, per payment until the fee falls.
 */
import { sameAddress } from "../../protocol/address.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { SupportedResponse } from "../../protocol/facilitator.ts";
import type { Network } from "../../protocol/network.ts";

/**
 * Throws `InvalidRequest` when the facilitator does not serve `token` on `network`, or when an amount
 * (smallest units) is below the token's configured minimum (`minAmountFloor`, else `minAmount`); the
 * message names the price and the minimum. Returns the amounts the network's fee puts under the
 * minimum now, with that minimum.
 *
 * @example
 * checkSettleableAmounts(await facilitator.supported(), { network, token, decimals: 6 }, [5_000n]);
 */
export function checkSettleableAmounts(
  supported: SupportedResponse,
  served: { network: Network; token: string; decimals: number },
  amounts: readonly bigint[],
): { minAmount: bigint; belowNow: bigint[] } | undefined {
  const listed = supported.networks
    .find((n) => n.network === served.network)
    ?.tokens.find((t) => sameAddress(t.address, served.token));
  if (listed === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `the facilitator does not settle the token ${served.token} on ${served.network}: use the token its /supported lists`,
      { details: { network: served.network, token: served.token } },
    );
  }
  if (listed.minAmount === undefined) return undefined;
  const now = BigInt(listed.minAmount);
  const minimum = listed.minAmountFloor === undefined ? now : BigInt(listed.minAmountFloor);
  const below = amounts.filter((amount) => amount < minimum);
  if (below.length === 0) {
    const belowNow = amounts.filter((amount) => amount < now);
    return belowNow.length === 0 ? undefined : { minAmount: now, belowNow };
  }
  const text = (amount: bigint) => formatUnitsExact(amount, served.decimals);
  throw new TollgateError(
    "InvalidRequest",
    `one-time price ${below.map(text).join(", ")} is below the facilitator's minimum payment of ${text(minimum)} on ${served.network}: it refuses every such payment; raise the price or have its operator lower TOLLGATE_MIN_AMOUNT`,
    {
      details: {
        network: served.network,
        token: served.token,
        minAmount: minimum.toString(),
        amounts: below.map(String),
      },
    },
  );
}
