/**
 * The transport of a client built from one or several RPC URLs (`parseRpcUrls`): each URL through
 * `batchingHttp`, several in viem's `fallback` in the order given, and around them retries with backoff.
 *
 * - Failover: a call goes to the first provider that is not passed over; a transient fault (HTTP 429 or
 *   5xx, a timeout, a refused connection) sends it on to the next at once. A provider that failed is
 *   passed over for `cooldownMs`, then tried again: one that comes back is used again, first in order.
 *   No provider is probed at rest: what the transport knows it learns from calls the client makes.
 * - Backoff: when every provider failed a call, the call waits (`rpcBackoff.ts`: exponential with
 *   jitter, `Retry-After` honoured, at most `backoffMaxMs`) and goes again, up to `retryCount` times.
 * - Stall: on a chain with a known block time (`chain.blockTime`), a provider whose head has not moved
 *   for `stallBlocks` block times while it is read is passed over (while another answers) until it moves.
 * - Lag: when the client reads the head (`eth_blockNumber`) and `headCheckMs` has passed since the last
 *   comparison, every other provider is asked its head too. One more than `maxLagBlocks` behind the
 *   highest is passed over until a later comparison finds it caught up. Reads then come from providers
 *   that see the chain as it is; a settlement never waits on a receipt a stale node cannot show.
 * - Secrets: every error leaving the transport has its URLs redacted (`rpcUrls.ts`); `onEvent` hears of
 *   providers by their redacted URL only.
 *
 * Invariants:
 * - A call is answered once: by the first provider that answers, or with the last fault after the
 *   retries. A node's own answer (a revert, "nonce too low", a refused log range) is passed on at once,
 *   neither retried nor sent to another provider. Sending a signed transaction again (to the same or
 *   another provider) is harmless: it has one hash, and the outbox reads "already known" as sent.
 * - Nothing runs at rest: no timer, no probe; a head comparison happens only beside a head read.
 */
import {
  BaseError,
  type EIP1193RequestFn,
  fallback,
  HttpRequestError,
  type Transport,
  type TransportConfig,
  shouldThrow as viemShouldThrow,
} from "viem";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { type BatchingHttpOptions, batchingHttp } from "./batchingHttp.ts";
import { backoffMs, isTransientRpcFault, retryAfterMs } from "./rpcBackoff.ts";
import { redactRpcUrl, redactRpcUrlsInError } from "./rpcUrls.ts";

export type RpcProviderEvent =
  /** A provider failed a call with a transient fault; it is passed over for `cooldownMs`. */
  | { kind: "down"; provider: string; error: unknown }
  /** A provider that was passed over answered again. */
  | { kind: "up"; provider: string }
  /** A provider's head is more than `maxLagBlocks` behind the highest of the others. */
  | { kind: "lagging"; provider: string; head: bigint; highest: bigint }
  /** A provider's head has not moved for `stallBlocks` block times while it was read. */
  | { kind: "stalled"; provider: string; head: bigint; sinceMs: number }
  /** A lagging provider's head is within `maxLagBlocks` again (or a stalled one's moved). */
  | { kind: "caught-up"; provider: string; head: bigint }
  /** Every provider failed a call; it goes again after `delayMs`. */
  | { kind: "retry"; attempt: number; delayMs: number; error: unknown };

export type RpcTransportOptions = Pick<
  BatchingHttpOptions,
  "maxWaitMs" | "maxInFlight" | "maxBatchSize" | "fetchFn" | "timeout" | "onBatchRefused"
> & {
  /** Rounds over the providers after the first, when all of them fail a call. Default 3. */
  retryCount?: number | undefined;
  /** The first backoff wait. Default 200 ms. */
  backoffBaseMs?: number | undefined;
  /** The longest backoff wait, `Retry-After` included. Default 5 000 ms. */
  backoffMaxMs?: number | undefined;
  /** How long a provider that failed is passed over. Default 30 000 ms. */
  cooldownMs?: number | undefined;
  /** A provider this many blocks behind the highest head is still used. Default 5. */
  maxLagBlocks?: number | undefined;
  /** Block times a head may stand still, on a chain with a known block time, before it counts as stalled. Default 5. */
  stallBlocks?: number | undefined;
  /** The least time between head comparisons (beside the client's own head reads). Default 30 000 ms. */
  headCheckMs?: number | undefined;
  onEvent?: ((event: RpcProviderEvent) => void) | undefined;
  /** Monotonic milliseconds (cooldowns, head checks). Default `performance.now`. */
  now?: (() => number) | undefined;
  /** The wall clock, for a `Retry-After` given as a date. */
  clock?: Clock | undefined;
  /** A number in [0, 1) for jitter. Default `Math.random`. */
  random?: (() => number) | undefined;
};

/** Thrown for a provider passed over (down or lagging) while another may answer: try the next. */
class ProviderPassedOver extends BaseError {
  readonly transient = true;
  constructor(provider: string, why: string) {
    // Its cause says "this provider cannot serve now" as an unanswered request does, so a caller that
    // meets it last (every other provider refused the call too) reads the chain as unreachable.
    super(`${provider} is passed over (${why})`, {
      cause: new HttpRequestError({ url: provider, details: `passed over: ${why}` }),
      name: "ProviderPassedOver",
    });
  }
}

/** A failure that says this provider cannot serve now, though another might (a lagging node's words). */
const PROVIDER_SIDE =
  /header not found|block not found|unknown block|missing trie node|limit exceeded|rate limit/i;

function failsOver(error: unknown): boolean {
  if (error instanceof ProviderPassedOver || isTransientRpcFault(error)) return true;
  const message = error instanceof Error ? error.message : "";
  return PROVIDER_SIDE.test(message) && !/block range|max.*range|too many (results|logs)/i.test(message);
}

type Provider = {
  url: string;
  /** The redacted URL: how logs, metrics and events name it. */
  name: string;
  downUntil: number;
  /** When it last failed: an answer to a call sent before then does not say it is back. */
  failedAt: number;
  down: boolean;
  lagging: boolean;
  /** The head last read from it, and since when it has been that. */
  head: bigint | undefined;
  headSince: number;
  stalled: boolean;
  base: ReturnType<Transport> | undefined;
};

/** What the transport knows of its providers and how it treats them: shared by the parts below. */
type Pool = {
  urls: readonly string[];
  providers: Provider[];
  options: RpcTransportOptions;
  now: () => number;
  cooldownMs: number;
  maxLag: bigint;
  headCheckMs: number;
  stallBlocks: number;
  lastHeadCheck: number;
  headCheckRunning: boolean;
  /** Set from the client's chain when the transport is built. */
  blockTimeMs: number | undefined;
};

/** How a call that every provider failed goes again. */
type RetryPolicy = {
  retryCount: number;
  backoff: { baseMs: number; maxMs: number; random: () => number };
  clock: Clock;
};

/** One provider per URL, named by its redacted URL (numbered when two redact alike). */
function createProviders(urls: readonly string[]): Provider[] {
  const names = new Map<string, number>();
  return urls.map((url) => {
    const redacted = redactRpcUrl(url);
    const seen = (names.get(redacted) ?? 0) + 1;
    names.set(redacted, seen);
    const name = seen === 1 ? redacted : `${redacted} (#${seen})`;
    return {
      url,
      name,
      downUntil: 0,
      failedAt: Number.NEGATIVE_INFINITY,
      down: false,
      lagging: false,
      head: undefined,
      headSince: 0,
      stalled: false,
      base: undefined,
    };
  });
}

function createPool(urls: readonly string[], options: RpcTransportOptions): Pool {
  return {
    urls,
    providers: createProviders(urls),
    options,
    now: options.now ?? (() => performance.now()),
    cooldownMs: options.cooldownMs ?? 30_000,
    maxLag: BigInt(options.maxLagBlocks ?? 5),
    headCheckMs: options.headCheckMs ?? 30_000,
    stallBlocks: options.stallBlocks ?? 5,
    lastHeadCheck: Number.NEGATIVE_INFINITY,
    headCheckRunning: false,
    blockTimeMs: undefined,
  };
}

const usable = (p: Provider, at: number) => !p.lagging && !p.stalled && p.downUntil <= at;

/** Notes a head read from `p`: a head that moves clears a stall; one that stands still too long is one. */
function noteHead(pool: Pool, p: Provider, head: bigint): void {
  const at = pool.now();
  if (p.head !== head) {
    p.head = head;
    p.headSince = at;
    if (p.stalled) {
      p.stalled = false;
      pool.options.onEvent?.({ kind: "caught-up", provider: p.name, head });
    }
    return;
  }
  const { blockTimeMs } = pool;
  if (blockTimeMs === undefined || blockTimeMs <= 0 || p.stalled) return;
  const sinceMs = at - p.headSince;
  if (sinceMs > pool.stallBlocks * blockTimeMs) {
    p.stalled = true;
    pool.options.onEvent?.({ kind: "stalled", provider: p.name, head, sinceMs });
  }
}

/** Whether `p` may be passed over now: it is down or lagging and another provider is not. */
function passOver(pool: Pool, p: Provider): boolean {
  const at = pool.now();
  return !usable(p, at) && pool.providers.some((q) => q !== p && usable(q, at));
}

function answered(pool: Pool, p: Provider, sentAt: number): void {
  if (sentAt < p.failedAt) return;
  p.downUntil = 0;
  if (p.down) {
    p.down = false;
    pool.options.onEvent?.({ kind: "up", provider: p.name });
  }
}

function failed(pool: Pool, p: Provider, error: unknown): void {
  p.failedAt = pool.now();
  p.downUntil = p.failedAt + pool.cooldownMs;
  if (!p.down) {
    p.down = true;
    pool.options.onEvent?.({ kind: "down", provider: p.name, error: redactRpcUrlsInError(error, pool.urls) });
  }
}

async function headOf(pool: Pool, p: Provider): Promise<bigint | undefined> {
  try {
    const head = BigInt((await p.base!.request({ method: "eth_blockNumber" })) as string);
    noteHead(pool, p, head);
    return head;
  } catch (error) {
    if (isTransientRpcFault(error)) failed(pool, p, error);
    return undefined;
  }
}

/** Marks `p` lagging when its head is more than `maxLag` behind `highest`, or caught up when no longer. */
function markLag(pool: Pool, p: Provider, head: bigint, highest: bigint): void {
  const behind = highest - head > pool.maxLag;
  if (behind && !p.lagging) {
    p.lagging = true;
    pool.options.onEvent?.({ kind: "lagging", provider: p.name, head, highest });
  } else if (!behind && p.lagging) {
    p.lagging = false;
    pool.options.onEvent?.({ kind: "caught-up", provider: p.name, head });
  }
}

/** Compares every provider's head; marks the ones too far behind, and the ones caught up. */
async function compareHeads(pool: Pool, first: Provider, firstHead: bigint): Promise<void> {
  pool.headCheckRunning = true;
  try {
    const heads = await Promise.all(pool.providers.map((p) => (p === first ? firstHead : headOf(pool, p))));
    const known = heads.filter((h): h is bigint => h !== undefined);
    if (known.length < 2) return;
    let highest = known[0]!;
    for (const head of known) if (head > highest) highest = head;
    for (const [i, p] of pool.providers.entries()) {
      const head = heads[i];
      if (head !== undefined) markLag(pool, p, head, highest);
    }
  } finally {
    pool.headCheckRunning = false;
  }
}

/** A head the client read from `p`: noted, and beside it a head comparison when one is due. */
function sawHead(pool: Pool, p: Provider, result: unknown): void {
  if (typeof result !== "string") return;
  noteHead(pool, p, BigInt(result));
  if (pool.providers.length < 2 || pool.headCheckRunning) return;
  const at = pool.now();
  if (at - pool.lastHeadCheck < pool.headCheckMs) return;
  pool.lastHeadCheck = at;
  void compareHeads(pool, p, BigInt(result)).catch(() => undefined);
}

/** Provider `p` as a transport of the fallback: built once, passed over while down or lagging. */
function providerTransport(pool: Pool, p: Provider, params: Parameters<Transport>[0]): ReturnType<Transport> {
  // viem's fallback builds its transports again for every call: one batchingHttp per provider
  // keeps its queue and batches.
  p.base ??= batchingHttp(p.url, { ...pool.options, retryCount: 0 })({ ...params, retryCount: 0 });
  const base = p.base;
  const request = (async (args, requestOptions) => {
    if (passOver(pool, p)) {
      const why = p.lagging ? "lagging" : p.stalled ? "stalled" : "failing";
      throw new ProviderPassedOver(p.name, why);
    }
    const sentAt = pool.now();
    try {
      const result = await base.request(args, requestOptions);
      answered(pool, p, sentAt);
      if (args.method === "eth_blockNumber") sawHead(pool, p, result);
      return result;
    } catch (error) {
      if (isTransientRpcFault(error)) failed(pool, p, error);
      throw error;
    }
  }) as EIP1193RequestFn;
  return { config: base.config, request, value: base.value };
}

/** The providers in order: the one alone, or several in viem's fallback that fails over as ours does. */
function failoverTransport(pool: Pool, params: Parameters<Transport>[0]): ReturnType<Transport> {
  const { providers } = pool;
  if (providers.length === 1) return providerTransport(pool, providers[0]!, params);
  return fallback(
    providers.map(
      (p) =>
        ((next: Parameters<Transport>[0]) => providerTransport(pool, p, { ...params, ...next })) as Transport,
    ),
    {
      retryCount: 0,
      // viem's rule first (a revert, a user's refusal), then ours: the node's own answers stay.
      shouldThrow: (error) => viemShouldThrow(error) || !failsOver(error),
    },
  )({ ...params, retryCount: 0 });
}

/** `inner`'s request, sent again with backoff while every provider fails it; errors leave redacted. */
function retryingRequest(pool: Pool, retry: RetryPolicy, inner: ReturnType<Transport>): EIP1193RequestFn {
  return (async (args, requestOptions) => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await inner.request(args, requestOptions);
      } catch (error) {
        redactRpcUrlsInError(error, pool.urls);
        if (attempt >= retry.retryCount || !failsOver(error) || requestOptions?.signal?.aborted) throw error;
        const delayMs = backoffMs(attempt, retryAfterMs(error, retry.clock.now()), retry.backoff);
        pool.options.onEvent?.({ kind: "retry", attempt: attempt + 1, delayMs, error });
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    }
  }) as EIP1193RequestFn;
}

/**
 * A viem transport over `urls` (in order of preference) with failover, backoff and lag avoidance.
 *
 * @example
 * const client = createPublicClient({ chain: base, transport: rpcTransport(parseRpcUrls(process.env.TOLLGATE_RPC_URL!)) });
 */
export function rpcTransport(urls: readonly string[], options: RpcTransportOptions = {}): Transport {
  if (urls.length === 0) throw new TypeError("rpcTransport needs at least one URL");
  const pool = createPool(urls, options);
  const retry: RetryPolicy = {
    retryCount: Math.max(0, options.retryCount ?? 3),
    backoff: {
      baseMs: options.backoffBaseMs ?? 200,
      maxMs: options.backoffMaxMs ?? 5_000,
      random: options.random ?? Math.random,
    },
    clock: options.clock ?? systemClock,
  };
  return (params) => {
    pool.blockTimeMs = params.chain?.blockTime;
    const inner = failoverTransport(pool, params);
    const config: TransportConfig = { ...inner.config, retryCount: 0 };
    return {
      config,
      request: retryingRequest(pool, retry, inner),
      value: { ...inner.value, url: urls[0], urls: pool.providers.map((p) => p.name) },
    };
  };
}
