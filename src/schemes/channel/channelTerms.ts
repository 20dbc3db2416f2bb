/** The channel terms of a 402 `channel` option (its common fields plus `extra`), as a payer reads them. */
import { ChannelTermsSchema } from "../../protocol/channelVoucher.ts";
import type { PaymentOption } from "../../protocol/paymentRequired.ts";
import type { ChannelTermsInput } from "./client/channelWallet.ts";

/** The terms of a `channel` option, or `undefined` when it is not one or its `extra` is malformed. */
export function channelTermsOf(option: PaymentOption): ChannelTermsInput | undefined {
  if (option.scheme !== "channel") return undefined;
  const parsed = ChannelTermsSchema.safeParse(option.extra);
  if (!parsed.success) return undefined;
  return {
    network: option.network,
    contract: parsed.data.contract,
    facilitator: parsed.data.facilitator,
    payee: option.payTo,
    token: option.token,
    price: BigInt(option.amount),
    minDeposit: BigInt(parsed.data.minDeposit),
    minCloseDelay: parsed.data.minCloseDelay,
    ...(parsed.data.tag === undefined ? {} : { tag: parsed.data.tag }),
  };
}
