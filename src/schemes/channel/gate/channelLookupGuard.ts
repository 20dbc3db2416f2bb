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
 * - Within that share each client (the address the adapter saw, an IPv6 client by its /64: see
 *   `SchemeRequest.client`) has its own bucket, `perClient.burst` at once and `perClient.perSecond`
 *   after, and at most `perClient.queue` of its lookups wait; past either it is refused with 429 before
 *   it takes a turn. So one address flooding made-up ids spends only its own share, and a payer at
 *   another address is read while that flood still runs. Lookups with no client (a host that did not
 *   say, an in-process call) share the gate's limits alone, as one client. A flood from many addresses
 *   still shares the gate's limits: that is the bound on what it costs the gate.
 * - An id the source says does not exist is not read again for `unknownTtlMs`; concurrent asks of one
 *   id share one read (and one turn).
 * - Memory is bounded: at most `maxIds` ids are remembered either way (the oldest forgotten first), at
 *   most `queue` lookups wait, and at most `maxClients` client buckets are held (the least recently
 *   used dropped first; a dropped client starts again with a full bucket).
 *
 * The turns (the gate's bucket, its queue and the clients' shares) are channelLookupTurns.ts; this
 * guard keeps the ids it knows either way and the reads in flight.
 */
import type { Address, Hex } from "viem";
import { type Clock, systemClock } from "../../../protocol/clock.ts";
import type { ChannelState, ChannelStateSource } from "../channelState.ts";
import { createChannelLookupTurns } from "./channelLookupTurns.ts";

/** How fast a gate reads channel ids it does not know (`schemeOptions.channel.lookups`). */
export type ChannelLookupLimits = {
  /** Reads of unknown ids at once (default 20). */
  burst?: number | undefined;
  /** Reads of unknown ids per second after the burst (default 10). */
  perSecond?: number | undefined;
  /** Reads waiting for their turn at most (default 50); past it a voucher is refused with 429. */
  queue?: number | undefined;
  /**
   * Each client's share of those reads; `false`: no per-client limit (every client shares the gate's).
   * Default 5 at once, 1 per second, 5 waiting.
   */
  perClient?:
    | {
        burst?: number | undefined;
        perSecond?: number | undefined;
        queue?: number | undefined;
      }
    | false
    | undefined;
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
  /** Client buckets held at most (default 10 000). */
  maxClients?: number | undefined;
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
  const lookups = createChannelLookupTurns({
    clock,
    wait,
    burst,
    perSecond,
    maxQueued,
    perClient: options.perClient === false ? undefined : (options.perClient ?? {}),
    maxClients: options.maxClients ?? 10_000,
  });
  const payTo = options.payTo.toLowerCase();
  const token = options.token.toLowerCase();
  /** Ids of channels paying this gate; insertion-ordered, re-inserted on use. */
  const own = new Set<string>();
  /** Ids the source did not know, until when that is believed. */
  const unknown = new Map<string, number>();
  const pending = new Map<string, Promise<ChannelState | undefined>>();

  const bounded = <K>(set: { size: number; keys(): IterableIterator<K>; delete(key: K): boolean }) => {
    if (set.size < maxIds) return;
    const oldest = set.keys().next();
    if (oldest.done !== true) set.delete(oldest.value);
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
    async get(channelId, context) {
      const id = channelId.toLowerCase();
      if (own.has(id)) return read(channelId, id);
      const until = unknown.get(id);
      if (until !== undefined) {
        if (until > clock.now()) return undefined;
        unknown.delete(id);
      }
      let lookup = pending.get(id);
      if (lookup === undefined) {
        const client = context?.client;
        lookup = (async () => {
          await lookups.turn(client);
          return read(channelId, id);
        })().finally(() => pending.delete(id));
        pending.set(id, lookup);
      }
      return lookup;
    },
  };
}
