/**
 * The turns of a gate's reads of channel ids it does not know (channelLookupGuard.ts): a token bucket
 * (`burst` at once, `perSecond` after) in front of a queue of at most `maxQueued` lookups, served in
 * order, and within it each client's own bucket and waiting places (`perClient`). A lookup past a limit
 * is refused with `RateLimited` before it takes a turn.
 */
import { createTokenBuckets } from "../../../http/tokenBucket.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";

export type ChannelLookupTurnsOptions = {
  clock: Clock;
  wait: (ms: number) => Promise<void>;
  burst: number;
  perSecond: number;
  maxQueued: number;
  /** Each client's share; `undefined`: none (every client shares the gate's limits). */
  perClient:
    | { burst?: number | undefined; perSecond?: number | undefined; queue?: number | undefined }
    | undefined;
  maxClients: number;
};

export type ChannelLookupTurns = {
  /**
   * Resolves when this lookup may read; throws `RateLimited` when the client's share is spent or the
   * queue is full. `client` undefined: no client bucket, the gate's limits alone.
   */
  turn(client: string | undefined): Promise<void>;
};

const refuse = (retryAfter: number, limit: string): never => {
  throw new TollgateError(
    "RateLimited",
    `too many vouchers for channels this gate does not know; retry after ${retryAfter} s`,
    { retryAfter, details: { limit } },
  );
};

/** Each client's bucket (default 5 at once, 1 per second); createTokenBuckets checks the burst and rate. */
function clientBucketsOf(options: ChannelLookupTurnsOptions) {
  const { perClient } = options;
  if (perClient === undefined) return undefined;
  return createTokenBuckets({
    capacity: perClient.burst ?? 5,
    refillPerSecond: perClient.perSecond ?? 1,
    clock: options.clock,
    maxKeys: options.maxClients,
  });
}

export function createChannelLookupTurns(options: ChannelLookupTurnsOptions): ChannelLookupTurns {
  const { clock, wait, burst, perSecond, maxQueued, perClient } = options;
  const clientQueue = perClient?.queue ?? 5;
  if (!(clientQueue >= 0)) throw new TypeError("channel lookups need perClient.queue ≥ 0");
  const clients = clientBucketsOf(options);
  /** Lookups waiting per client; an entry lives only while one waits, so at most `queue` entries. */
  const waiting = new Map<string, number>();
  const queue: { resolve: () => void; client: string | undefined }[] = [];
  let tokens = burst;
  let refilledAt = clock.now();
  let draining = false;

  const refill = () => {
    const now = clock.now();
    // A clock that steps back earns nothing.
    tokens = Math.min(burst, tokens + (Math.max(0, now - refilledAt) / 1000) * perSecond);
    refilledAt = now;
  };

  const leave = (client: string | undefined) => {
    if (client === undefined) return;
    const count = (waiting.get(client) ?? 1) - 1;
    if (count <= 0) waiting.delete(client);
    else waiting.set(client, count);
  };

  const drain = async () => {
    if (draining) return;
    draining = true;
    try {
      while (queue.length > 0) {
        refill();
        while (tokens >= 1 && queue.length > 0) {
          tokens -= 1;
          const next = queue.shift();
          if (next !== undefined) {
            leave(next.client);
            next.resolve();
          }
        }
        if (queue.length > 0) await wait(Math.ceil(((1 - tokens) * 1000) / perSecond));
      }
    } finally {
      draining = false;
    }
  };

  const turn = (client: string | undefined): Promise<void> => {
    const limited = client !== undefined && clients !== undefined;
    if (limited) {
      const taken = clients.take(client);
      if (!taken.ok) refuse(taken.retryAfterSeconds, "channelLookupsPerClient");
    }
    refill();
    if (queue.length === 0 && tokens >= 1) {
      tokens -= 1;
      return Promise.resolve();
    }
    // Only a lookup that must wait counts against its client's waiting places.
    if (limited && (waiting.get(client) ?? 0) >= clientQueue) {
      refuse(Math.max(1, Math.ceil((queue.length + 1) / perSecond)), "channelLookupsPerClient");
    }
    if (queue.length >= maxQueued) {
      refuse(Math.max(1, Math.ceil((queue.length + 1) / perSecond)), "channelLookups");
    }
    return new Promise<void>((resolve) => {
      queue.push({ resolve, client });
      if (client !== undefined && clients !== undefined) waiting.set(client, (waiting.get(client) ?? 0) + 1);
      void drain();
    });
  };

  return { turn };
}
