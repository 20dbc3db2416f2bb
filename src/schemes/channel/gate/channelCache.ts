/**
 * The verifier's cache of channel state (channelVerifier.ts): each channel read once from the source,
 * refreshed in the background once `refreshMs` old and read again before it serves once `maxStaleMs`
 * old; an id the source does not know is remembered for `unknownTtlMs`; concurrent reads of one id
 * share one read. At most `maxChannels` channels (and unknown ids) are held, the oldest dropped first.
 */
import type { Hex } from "viem";
import { type ChannelVoucherDomain, channelVoucherPrefix } from "../../../protocol/channelVoucher.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { ChannelLookupContext, ChannelState, ChannelStateSource } from "../channelState.ts";

export type CachedChannel = {
  state: ChannelState;
  /** The 128 constant bytes of this channel's voucher messages. */
  prefix: Uint8Array;
  verifyKey: { key: ChannelState["sessionKey"]; dsaEncoding: "ieee-p1363" };
  fetchedAt: number;
  refreshing: boolean;
};

export type ChannelCacheOptions = {
  source: ChannelStateSource;
  domain: ChannelVoucherDomain;
  clock: Clock;
  refreshMs: number;
  maxStaleMs: number;
  unknownTtlMs: number;
  maxChannels: number;
  onClosing?: ((channelId: Hex) => void) | undefined;
};

export type ChannelCache = {
  /** The channel as cached (refetched first when too old to serve), or read when unknown. */
  lookup(channelId: Hex, context?: ChannelLookupContext): Promise<CachedChannel | undefined>;
  /** Reads the channel from the source now (one read shared by concurrent asks). */
  fetch(channelId: Hex, context?: ChannelLookupContext): Promise<CachedChannel | undefined>;
};

export function createChannelCache(options: ChannelCacheOptions): ChannelCache {
  const { clock, domain, maxChannels, maxStaleMs, refreshMs, unknownTtlMs } = options;
  const cache = new Map<string, CachedChannel>();
  const unknown = new Map<string, number>();
  const inflight = new Map<string, Promise<CachedChannel | undefined>>();

  /** `readAt`: when the read began; the state is at least that fresh, perhaps no fresher. */
  const remember = (state: ChannelState, readAt: number): CachedChannel => {
    const previous = cache.get(state.channelId);
    const entry: CachedChannel = {
      state,
      prefix: previous?.prefix ?? channelVoucherPrefix(domain, state.channelId),
      verifyKey: { key: state.sessionKey, dsaEncoding: "ieee-p1363" },
      fetchedAt: readAt,
      refreshing: false,
    };
    if (previous === undefined && cache.size >= maxChannels) {
      const oldest = cache.keys().next();
      if (oldest.done !== true) cache.delete(oldest.value);
    }
    cache.set(state.channelId, entry);
    if (state.closeRequestedAt !== 0 && previous?.state.closeRequestedAt === 0) {
      options.onClosing?.(state.channelId);
    }
    return entry;
  };

  const fetch = (channelId: Hex, context?: ChannelLookupContext): Promise<CachedChannel | undefined> => {
    let pending = inflight.get(channelId);
    if (pending === undefined) {
      const readAt = clock.now();
      pending = options.source
        .get(channelId, context)
        .then((state) => {
          if (state === undefined) {
            if (unknown.size >= maxChannels) unknown.clear();
            unknown.set(channelId, clock.now() + unknownTtlMs);
            cache.delete(channelId);
            return undefined;
          }
          unknown.delete(channelId);
          return remember(state, readAt);
        })
        .finally(() => inflight.delete(channelId));
      inflight.set(channelId, pending);
    }
    return pending;
  };

  const lookup = async (
    channelId: Hex,
    context?: ChannelLookupContext,
  ): Promise<CachedChannel | undefined> => {
    const cached = cache.get(channelId);
    if (cached !== undefined) {
      const age = clock.now() - cached.fetchedAt;
      // Too old to vouch that no close was requested since (channelVerifier.ts): read it before serving.
      if (age >= maxStaleMs) return fetch(channelId, context);
      if (!cached.refreshing && age >= refreshMs) {
        cached.refreshing = true;
        // Background: the request goes on with what is cached (only deposit and close state change).
        fetch(channelId).catch(() => {
          cached.refreshing = false;
        });
      }
      return cached;
    }
    const until = unknown.get(channelId);
    if (until !== undefined && until > clock.now()) return undefined;
    return fetch(channelId, context);
  };

  return { lookup, fetch };
}
