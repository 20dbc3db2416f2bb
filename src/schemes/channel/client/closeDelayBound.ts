/** The payer's bound on a channel's close delay: how long a vanished seller could lock its deposit. */
import { TollgateError } from "../../../protocol/errors.ts";
import type { ChannelTermsInput } from "./channelWalletTypes.ts";

/** The longest close delay a payer accepts unless configured: one day. */
export const DEFAULT_MAX_CHANNEL_CLOSE_DELAY = 86_400;

/**
 * `OfferMismatch` when a gate's minimum close delay is above the payer's bound: the payer's deposit would
 * be locked longer than it accepts after a close request, should the seller vanish. `undefined` when it
 * is within.
 */
export function closeDelayRefusal(
  terms: Pick<ChannelTermsInput, "minCloseDelay" | "payee">,
  maxCloseDelay: number,
  tool?: string,
): TollgateError | undefined {
  if (terms.minCloseDelay <= maxCloseDelay) return undefined;
  return new TollgateError(
    "OfferMismatch",
    `${tool === undefined ? "" : `${tool}: `}the seller's gate asks a channel close delay of at least ${terms.minCloseDelay} s, above the payer's bound of ${maxCloseDelay} s; refused before opening a channel`,
    {
      details: {
        ...(tool === undefined ? {} : { tool }),
        field: "closeDelay",
        payee: terms.payee,
        asked: String(terms.minCloseDelay),
        bound: String(maxCloseDelay),
      },
    },
  );
}
