/**
 * Hands the gate's latest vouchers to the facilitator (`POST /channels/vouchers`), which claims them on
 * chain in batches for the seller. Runs on an interval, on demand (`flush`: a channel is closing) and
 * once more on `stop`. A voucher is marked forwarded only after the facilitator accepted it, so a gate
 * that dies before or during a forward sends it again after restart (the facilitator ignores a voucher
 * at or below what it holds). Forwarding is off the request path: a slow facilitator delays claims,
 * never a paid request.
 */
import { z } from "zod";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { base64UrlEncode } from "../../../protocol/base64.ts";
import { type ChannelVoucher, MAX_CHANNEL_VOUCHERS_PER_REQUEST } from "../../../protocol/channelVoucher.ts";
import type { SchemeLogger } from "../../types.ts";
import type { ForwardableVoucher, VoucherStore } from "./voucherStore.ts";

/** Sends one batch; resolves once the facilitator has stored it. */
export type SendVouchers = (vouchers: ChannelVoucher[]) => Promise<void>;

/** `POST /channels/vouchers` with the provider's API key. */
export function postChannelVouchers(
  facilitator: Pick<FacilitatorClient, "request">,
  apiKey: string,
): SendVouchers {
  return async (vouchers) => {
    await facilitator.request("POST", "/channels/vouchers", ChannelVouchersReplySchema, {
      headers: { authorization: `Bearer ${apiKey}` },
      body: { vouchers },
    });
  };
}

const ChannelVouchersReplySchema = z.object({}).passthrough();

export type VoucherForwarderOptions = {
  store: VoucherStore;
  send: SendVouchers;
  /** Between forwards (default 5 000 ms). */
  intervalMs?: number | undefined;
  logger?: SchemeLogger | undefined;
  setInterval?: (fn: () => void, ms: number) => { unref?(): unknown };
  clearInterval?: (handle: unknown) => void;
};

export type VoucherForwarder = {
  start(): void;
  /** Forwards everything pending now; resolves with how many vouchers the facilitator accepted. */
  flush(): Promise<number>;
  /** Stops the interval and forwards what is pending one last time (a failure is logged, not thrown). */
  stop(): Promise<void>;
};

const toWire = (v: ForwardableVoucher): ChannelVoucher => ({
  channelId: v.channelId,
  cumulativeAmount: v.cumulativeAmount.toString(),
  signature: base64UrlEncode(v.signature),
});

/**
 * @example
 * const forwarder = createVoucherForwarder({ store, send: postChannelVouchers(facilitator, apiKey) });
 * forwarder.start();
 */
export function createVoucherForwarder(options: VoucherForwarderOptions): VoucherForwarder {
  const intervalMs = options.intervalMs ?? 5_000;
  let timer: unknown;
  let chain: Promise<number> = Promise.resolve(0);
  let queued: Promise<number> | undefined;

  const forwardAll = async (): Promise<number> => {
    let total = 0;
    for (;;) {
      const batch = await options.store.unforwarded(MAX_CHANNEL_VOUCHERS_PER_REQUEST);
      if (batch.length === 0) return total;
      await options.send(batch.map(toWire));
      for (const v of batch) await options.store.markForwarded(v.channelId, v.cumulativeAmount);
      total += batch.length;
      if (batch.length < MAX_CHANNEL_VOUCHERS_PER_REQUEST) return total;
    }
  };

  // One forward at a time; flushes asked for while one runs share the single run queued after it
  // (which sees every voucher charged before it starts).
  const flush = (): Promise<number> => {
    if (queued !== undefined) return queued;
    const next = chain
      .catch(() => 0)
      .then(() => {
        queued = undefined;
        return forwardAll();
      });
    queued = next;
    chain = next;
    return next;
  };

  const tick = () => {
    flush().catch((error: unknown) =>
      options.logger?.warn({ err: error }, "forwarding channel vouchers failed"),
    );
  };

  return {
    start() {
      if (timer !== undefined) return;
      const set = options.setInterval ?? ((fn: () => void, ms: number) => setInterval(fn, ms));
      const handle = set(tick, intervalMs);
      handle.unref?.();
      timer = handle;
    },
    flush,
    async stop() {
      if (timer !== undefined) {
        (options.clearInterval ?? ((h: unknown) => clearInterval(h as NodeJS.Timeout)))(timer);
        timer = undefined;
      }
      try {
        await flush();
      } catch (error) {
        // Kept in the store: the next start forwards them.
        options.logger?.warn({ err: error }, "forwarding channel vouchers on stop failed");
      }
    },
  };
}
