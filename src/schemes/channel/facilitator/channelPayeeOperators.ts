/**
 * Whether the gas account may claim for a payee (the payee itself, or named its operator on the
 * contract), read from the chain and trusted for `cacheMs`: a claim it may not make would only burn gas.
 */
import type { Address } from "viem";
import { getIsChannelOperator } from "../../../chain/actions/channels/getIsChannelOperator.ts";
import type { ChannelClaimWorkerContext } from "./channelClaimTypes.ts";

export type PayeeOperators = {
  /** Reads (or recalls) whether the gas account may claim for `payee`. */
  mayClaimFor(payee: string): Promise<boolean>;
  /** Whether the gas account was last found allowed for `payee` (no read). */
  known(payee: string): boolean;
};

export function createPayeeOperators(
  ctx: Pick<ChannelClaimWorkerContext, "clock" | "outbox" | "publicClient" | "contract">,
  cacheMs: number,
): PayeeOperators {
  /** Payees known to have named (or not named) the gas account their operator, and until when. */
  const operatorOf = new Map<string, { allowed: boolean; until: number }>();

  async function mayClaimFor(payee: string): Promise<boolean> {
    const known = operatorOf.get(payee);
    if (known !== undefined && known.until > ctx.clock.now()) return known.allowed;
    const allowed =
      payee === ctx.outbox.sender.toLowerCase() ||
      (await getIsChannelOperator(ctx.publicClient, {
        channels: ctx.contract,
        payee: payee as Address,
        operator: ctx.outbox.sender,
      }));
    operatorOf.set(payee, { allowed, until: ctx.clock.now() + cacheMs });
    return allowed;
  }

  return { mayClaimFor, known: (payee) => operatorOf.get(payee)?.allowed === true };
}
