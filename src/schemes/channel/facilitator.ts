/**
 * The `channel` scheme's facilitator part (docs/channels.md): the relayed open and close request
 * (`POST /channels`, `POST /channels/:id/close-request`), the public channel read, the gate's voucher
 * hand-over (`POST /channels/vouchers`), the cooperative close and the claim worker that batches
 * vouchers into `claimMany` through the outbox. A facilitator without a TollgateChannels address
 * builds an empty part. Loaded by the facilitator only, never by a gate.
 */
import type { Address, Hex } from "viem";
import { minimumAmountOf } from "../../facilitator/checkSignedPayment.ts";
import {
  defineFacilitatorScheme,
  type FacilitatorSchemeContext,
} from "../../facilitator/facilitatorSchemeParts.ts";
import type { FacilitatorToken } from "../../facilitator/facilitatorToken.ts";
import { defaultPayerLimit } from "../../http/rateLimits.ts";
import { createTokenBuckets, type TokenBucketRule } from "../../http/tokenBucket.ts";
import { MIN_CHANNEL_CLOSE_DELAY } from "../../protocol/channels.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { createSessionKeyCache } from "./facilitator/channelChain.ts";
import {
  type ChannelClaimWorkerOptions,
  createChannelClaimWorker,
} from "./facilitator/channelClaimWorker.ts";
import { createChannelCloseService } from "./facilitator/channelCloseService.ts";
import { createChannelOpenService } from "./facilitator/channelOpenService.ts";
import { mountChannelRoutes } from "./facilitator/channelRoutes.ts";
import { createChannelVoucherIntake } from "./facilitator/channelVoucherIntake.ts";

export type ChannelFacilitatorOptions = {
  /** Claim worker settings, or `false` to hold vouchers here and claim in another instance. */
  claims?: ChannelClaimWorkerOptions | false | undefined;
  /**
   * The smallest deposit relayed (smallest unit), for opens and top-ups alike. Default: 10 × the
   * token's minimum payment.
   */
  minDeposit?: bigint | undefined;
  /**
   * The shortest close delay relayed, seconds (default, and never less than, TollgateChannels'
   * MIN_CLOSE_DELAY: an hour). Gates ask for their own minimum on top.
   */
  minCloseDelay?: number | undefined;
  /** Relayed opens and close requests per payer (default: the same rule as `/authorize`). */
  perPayer?: TokenBucketRule | false | undefined;
  /** Seconds an open's authorization must still be valid for when it arrives (default 10). */
  minRemainingSeconds?: number | undefined;
};

/**
 * @example
 * createFacilitator({ …, channels, schemes: [channelFacilitator({ claims: { intervalMs: 100 } })] });
 */
export function channelFacilitator(options: ChannelFacilitatorOptions = {}) {
  return defineFacilitatorScheme({
    id: "channel",
    create(ctx: FacilitatorSchemeContext) {
      const contract: Address | undefined = ctx.channels;
      if (contract === undefined) return {};
      const sessionKey = createSessionKeyCache();
      const payers =
        options.perPayer === false
          ? undefined
          : createTokenBuckets({ ...(options.perPayer ?? defaultPayerLimit), clock: ctx.clock });
      const takePayer = (payer: Address) => {
        const taken = payers?.take(payer.toLowerCase());
        if (taken !== undefined && !taken.ok) {
          throw new TollgateError(
            "RateLimited",
            `too many requests for this payer; retry after ${taken.retryAfterSeconds} s`,
            {
              retryAfter: taken.retryAfterSeconds,
              details: { limit: "payer", payer },
            },
          );
        }
      };
      const worker =
        options.claims === false
          ? undefined
          : createChannelClaimWorker({ ...ctx, outbox: ctx.outbox, contract }, options.claims);
      const signalWorker = () => worker?.signal();
      // One minimum for opens and top-ups: a payer sizing its top-up like a new channel is never refused
      // for less than the open it would otherwise make.
      const minDeposit = (token: FacilitatorToken) => options.minDeposit ?? 10n * minimumAmountOf(token);
      const opens = createChannelOpenService(
        { ...ctx, contract },
        {
          minDeposit,
          minCloseDelay: Math.max(options.minCloseDelay ?? MIN_CHANNEL_CLOSE_DELAY, MIN_CHANNEL_CLOSE_DELAY),
          minRemainingSeconds: options.minRemainingSeconds ?? 10,
          takePayer,
          isSessionKey: (x: Hex, y: Hex) => sessionKey(x, y) !== undefined,
        },
      );
      const closes = createChannelCloseService({
        ...ctx,
        contract,
        takePayer,
        signalWorker,
        minTopUp: minDeposit,
        minRemainingSeconds: options.minRemainingSeconds,
      });
      const vouchers = createChannelVoucherIntake({ ...ctx, contract, sessionKey });
      return {
        rateLimited: ["/channels", "/channels/*"],
        routes(app) {
          mountChannelRoutes(app, { ctx, contract, opens, closes, vouchers, onVouchers: signalWorker });
        },
        async start() {
          await worker?.start();
        },
        async close() {
          await worker?.stop();
        },
      };
    },
  });
}

/** The part with its defaults (listed in src/facilitator/facilitatorSchemes.ts). */
export const channelFacilitatorPart = channelFacilitator();
