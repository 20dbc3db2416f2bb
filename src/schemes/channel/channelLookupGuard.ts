/**
 * A gate's guard in front of its channel source: lookups of channel ids it does not know to be its own
 * are remembered and rate-limited here, before any facilitator or chain read.
 *
 * Why: a voucher names its channel, and only the channel's state (its session key) can tell a real
 * voucher from a made-up one, so every id new to the gate costs a read. Unguarded, a stranger sending
 * vouchers for made-up ids made the gate spend its whole allowance at the facilitator (which limits the
 * gate's address, or its provider key), and the first voucher of a payer's new channel was refused.
 *
 * Invariants:
 * - A channel known to pay this gate (payee and token), once read, is read again straight through:
 *   refreshes, top-ups and cooperative closes of the gate's channels never wait behind a flood.
 * - Any other id is read at most `burst` at once and `perSecond` after: the rest wait their turn in
 *   order, at most `queue` of them; a request past that is refused with `RateLimited` (429 with
 *   `Retry-After`) without a read. So a flood of made-up ids takes at most that share of the gate's
 *   reads, and a payer's new channel arriving after it waits at most `queue / perSecond` seconds.
 * - An id the source says does not exist is not read again for `unknownTtlMs`; concurrent asks of one
 *   id share one read (and one turn).
 * - Memory is bounded: at most `maxIds` ids are remembered either way (the oldest forgotten first), and
 *   at most `queue` lookups wait.
 */
import type { Address, Hex } from "viem";
import { type Clock, systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { ChannelState, ChannelStateSource } from "./channelState.ts";

/** How fast a gate reads channel ids it does not know (`schemeOptions.channel.lookups`). */
export type ChannelLookupLimits = {
  /** Reads of unknown ids at once (default 20). */
  burst?: number | undefined;
  /** Reads of unknown ids per second after the burst (default 10). */
  perSecond?: number | undefined;
  /** Reads waiting for their turn at most (default 50); past it a voucher is refused with 429. */
  queue?: number | undefined;
};

export type ChannelLookupGuardOptions = ChannelLookupLimits & {
  /** This gate's payee and token: channels paying them are the gate's own. */
  payTo: Address;
  token: Address;
  clock?: Clock | undefined;
  /** Remember an id the source does not know this long (default 5 000 ms). */
  unknownTtlMs?: number | undefined;
  /** Ids remembered at most, of either kind (default 100 000). */
  maxIds?: number | undefined;
  /** Waits `ms` for the next turn (default a timer; tests pass one that moves their clock). */
  wait?: ((ms: number) => Promise<void>) | undefined;
};

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * @example
 * const source = guardChannelSource(createFacilitatorChannelSource(facilitator, apiKey), { payTo, token });
 * const verifier = createChannelVerifier({ …, source });
 */
export function guardChannelSource(
  source: ChannelStateSource,
  options: ChannelLookupGuardOptions,
): ChannelStateSource {
  const clock = options.clock ?? systemClock;
  const wait = options.wait ?? sleep;
  const burst = options.burst ?? 20;
  const perSecond = options.perSecond ?? 10;
  const maxQueued = options.queue ?? 50;
  const unknownTtlMs = options.unknownTtlMs ?? 5_000;
  const maxIds = options.maxIds ?? 100_000;
  if (!(burst >= 1) || !(perSecond > 0) || !(maxQueued >= 0)) {
    throw new TypeError("channel lookups need burst ≥ 1, perSecond > 0 and queue ≥ 0");
  }
  const payTo = options.payTo.toLowerCase();
  const token = options.token.toLowerCase();
  /** Ids of channels paying this gate; insertion-ordered, re-inserted on use. */
  const own = new Set<string>();
  /** Ids the source did not know, until when that is believed. */
  const unknown = new Map<string, number>();
  const pending = new Map<string, Promise<ChannelState | undefined>>();
  const queue: (() => void)[] = [];
  let tokens = burst;
  let refilledAt = clock.now();
  let draining = false;

  const bounded = <K>(set: { size: number; keys(): IterableIterator<K>; delete(key: K): boolean }) => {
    if (set.size < maxIds) return;
    const oldest = set.keys().next();
    if (oldest.done !== true) set.delete(oldest.value);
  };

  const refill = () => {
    const now = clock.now();
    // A clock that steps back earns nothing.
    tokens = Math.min(burst, tokens + (Math.max(0, now - refilledAt) / 1000) * perSecond);
    refilledAt = now;
  };

  const drain = async () => {
    if (draining) return;
    draining = true;
    try {
      while (queue.length > 0) {
        refill();
        while (tokens >= 1 && queue.length > 0) {
          tokens -= 1;
          queue.shift()?.();
        }
        if (queue.length > 0) await wait(Math.ceil(((1 - tokens) * 1000) / perSecond));
      }
    } finally {
      draining = false;
    }
  };

  /** Resolves when this lookup may read; throws `RateLimited` when the queue is full. */
  const turn = (): Promise<void> => {
    refill();
    if (queue.length === 0 && tokens >= 1) {
      tokens -= 1;
      return Promise.resolve();
    }
    if (queue.length >= maxQueued) {
      const retryAfter = Math.max(1, Math.ceil((queue.length + 1) / perSecond));
      throw new TollgateError(
        "RateLimited",
        `too many vouchers for channels this gate does not know; retry after ${retryAfter} s`,
        { retryAfter, details: { limit: "channelLookups" } },
      );
    }
    return new Promise<void>((resolve) => {
      queue.push(resolve);
      void drain();
    });
  };

  const read = async (channelId: Hex, id: string): Promise<ChannelState | undefined> => {
    const state = await source.get(channelId);
    own.delete(id);
    if (state === undefined) {
      unknown.delete(id);
      bounded(unknown);
      unknown.set(id, clock.now() + unknownTtlMs);
    } else {
      unknown.delete(id);
      if (state.payee.toLowerCase() === payTo && state.token.toLowerCase() === token) {
        bounded(own);
        own.add(id);
      }
    }
    return state;
  };

  return {
    async get(channelId) {
      const id = channelId.toLowerCase();
      if (own.has(id)) return read(channelId, id);
      const until = unknown.get(id);
      if (until !== undefined) {
        if (until > clock.now()) return undefined;
        unknown.delete(id);
      }
      let lookup = pending.get(id);
      if (lookup === undefined) {
        lookup = (async () => {
          await turn();
          return read(channelId, id);
        })().finally(() => pending.delete(id));
        pending.set(id, lookup);
      }
      return lookup;
    },
  };
}
