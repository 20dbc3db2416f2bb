/** How large a channel's deposit (or top-up) is: `calls` requests at its price, within the gate's minimum and the payer's cap. */
import { TollgateError } from "../../../protocol/errors.ts";
import type { ChannelTermsInput, ChannelWalletOptions } from "./channelWalletTypes.ts";

/**
 * The deposit for `calls` requests (else the payer's `calls`, else 1 000), at least the gate's minimum
 * and at most `maxDeposit`. Throws `BudgetExceeded` when the cap is below the gate's minimum or one price.
 */
export function channelDepositFor(
  sizing: Pick<ChannelWalletOptions, "calls" | "maxDeposit">,
  terms: ChannelTermsInput,
  calls: number | undefined,
): bigint {
  const wanted = calls ?? (typeof sizing.calls === "function" ? sizing.calls(terms) : sizing.calls);
  const n = BigInt(Math.max(1, Math.floor(wanted ?? 1_000)));
  let deposit = terms.price * n;
  if (deposit < terms.minDeposit) deposit = terms.minDeposit;
  if (sizing.maxDeposit !== undefined && deposit > sizing.maxDeposit) {
    if (sizing.maxDeposit < terms.minDeposit || sizing.maxDeposit < terms.price) {
      throw new TollgateError(
        "BudgetExceeded",
        "the gate's minimum channel deposit is above the payer's cap",
        {
          details: { minDeposit: terms.minDeposit.toString(), maxDeposit: sizing.maxDeposit.toString() },
        },
      );
    }
    deposit = sizing.maxDeposit;
  }
  return deposit;
}
