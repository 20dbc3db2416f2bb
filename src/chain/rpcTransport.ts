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

/**
 * A viem transport over `urls` (in order of preference) with failover, backoff and lag avoidance.
 *
 * @example
 * const client = createPublicClient({ chain: base, transport: rpcTransport(parseRpcUrls(process.env.TOLLGATE_RPC_URL!)) });
 */
export function rpcTransport(urls: readonly string[], options: RpcTransportOptions = {}): Transport {
  if (urls.length === 0) throw new TypeError("rpcTransport needs at least one URL");
  const now = options.now ?? (() => performance.now());
  const random = options.random ?? Math.random;
  const clock = options.clock ?? systemClock;
  const retryCount = Math.max(0, options.retryCount ?? 3);
  const cooldownMs = options.cooldownMs ?? 30_000;
  const maxLag = BigInt(options.maxLagBlocks ?? 5);
  const headCheckMs = options.headCheckMs ?? 30_000;
  const backoff = { baseMs: options.backoffBaseMs ?? 200, maxMs: options.backoffMaxMs ?? 5_000, random };
  const names = new Map<string, number>();
  const providers: Provider[] = urls.map((url) => {
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
  let lastHeadCheck = Number.NEGATIVE_INFINITY;
  let headCheckRunning = false;

  const stallBlocks = options.stallBlocks ?? 5;
  /** Set from the client's chain when the transport is built. */
  let blockTimeMs: number | undefined;

  const usable = (p: Provider, at: number) => !p.lagging && !p.stalled && p.downUntil <= at;

  /** Notes a head read from `p`: a head that moves clears a stall; one that stands still too long is one. */
  function noteHead(p: Provider, head: bigint): void {
    const at = now();
    if (p.head !== head) {
      p.head = head;
      p.headSince = at;
      if (p.stalled) {
        p.stalled = false;
        options.onEvent?.({ kind: "caught-up", provider: p.name, head });
      }
      return;
    }
    if (blockTimeMs === undefined || blockTimeMs <= 0 || p.stalled) return;
    const sinceMs = at - p.headSince;
    if (sinceMs > stallBlocks * blockTimeMs) {
      p.stalled = true;
      options.onEvent?.({ kind: "stalled", provider: p.name, head, sinceMs });
    }
  }

  /** Whether `p` may be passed over now: it is down or lagging and another provider is not. */
  function passOver(p: Provider): boolean {
    const at = now();
    return !usable(p, at) && providers.some((q) => q !== p && usable(q, at));
  }

  function answered(p: Provider, sentAt: number): void {
    if (sentAt < p.failedAt) return;
    p.downUntil = 0;
    if (p.down) {
      p.down = false;
      options.onEvent?.({ kind: "up", provider: p.name });
    }
  }

  function failed(p: Provider, error: unknown): void {
    p.failedAt = now();
    p.downUntil = p.failedAt + cooldownMs;
    if (!p.down) {
      p.down = true;
      options.onEvent?.({ kind: "down", provider: p.name, error: redactRpcUrlsInError(error, urls) });
    }
  }

  async function headOf(p: Provider): Promise<bigint | undefined> {
    try {
      const head = BigInt((await p.base!.request({ method: "eth_blockNumber" })) as string);
      noteHead(p, head);
      return head;
    } catch (error) {
      if (isTransientRpcFault(error)) failed(p, error);
      return undefined;
    }
  }

  /** Compares every provider's head; marks the ones too far behind, and the ones caught up. */
  async function compareHeads(first: Provider, firstHead: bigint): Promise<void> {
    headCheckRunning = true;
    try {
      const heads = await Promise.all(providers.map((p) => (p === first ? firstHead : headOf(p))));
      const known = heads.filter((h): h is bigint => h !== undefined);
      if (known.length < 2) return;
      let highest = known[0]!;
      for (const head of known) if (head > highest) highest = head;
      for (const [i, p] of providers.entries()) {
        const head = heads[i];
        if (head === undefined) continue;
        const behind = highest - head > maxLag;
        if (behind && !p.lagging) {
          p.lagging = true;
          options.onEvent?.({ kind: "lagging", provider: p.name, head, highest });
        } else if (!behind && p.lagging) {
          p.lagging = false;
          options.onEvent?.({ kind: "caught-up", provider: p.name, head });
        }
      }
    } finally {
      headCheckRunning = false;
    }
  }

  function sawHead(p: Provider, result: unknown): void {
    if (typeof result !== "string") return;
    noteHead(p, BigInt(result));
    if (providers.length < 2 || headCheckRunning) return;
    const at = now();
    if (at - lastHeadCheck < headCheckMs) return;
    lastHeadCheck = at;
    void compareHeads(p, BigInt(result)).catch(() => undefined);
  }

  /** Provider `p` as a transport of the fallback: built once, passed over while down or lagging. */
  function child(p: Provider, params: Parameters<Transport>[0]): ReturnType<Transport> {
    // viem's fallback builds its transports again for every call: one batchingHttp per provider
    // keeps its queue and batches.
    p.base ??= batchingHttp(p.url, { ...options, retryCount: 0 })({ ...params, retryCount: 0 });
    const base = p.base;
    const request = (async (args, requestOptions) => {
      if (passOver(p)) {
        const why = p.lagging ? "lagging" : p.stalled ? "stalled" : "failing";
        throw new ProviderPassedOver(p.name, why);
      }
      const sentAt = now();
      try {
        const result = await base.request(args, requestOptions);
        answered(p, sentAt);
        if (args.method === "eth_blockNumber") sawHead(p, result);
        return result;
      } catch (error) {
        if (isTransientRpcFault(error)) failed(p, error);
        throw error;
      }
    }) as EIP1193RequestFn;
    return { config: base.config, request, value: base.value };
  }

  return (params) => {
    blockTimeMs = params.chain?.blockTime;
    const inner: ReturnType<Transport> =
      providers.length === 1
        ? child(providers[0]!, params)
        : fallback(
            providers.map(
              (p) => ((next: Parameters<Transport>[0]) => child(p, { ...params, ...next })) as Transport,
            ),
            {
              retryCount: 0,
              // viem's rule first (a revert, a user's refusal), then ours: the node's own answers stay.
              shouldThrow: (error) => viemShouldThrow(error) || !failsOver(error),
            },
          )({ ...params, retryCount: 0 });
    const request = (async (args, requestOptions) => {
      for (let attempt = 0; ; attempt++) {
        try {
          return await inner.request(args, requestOptions);
        } catch (error) {
          redactRpcUrlsInError(error, urls);
          if (attempt >= retryCount || !failsOver(error) || requestOptions?.signal?.aborted) throw error;
          const delayMs = backoffMs(attempt, retryAfterMs(error, clock.now()), backoff);
          options.onEvent?.({ kind: "retry", attempt: attempt + 1, delayMs, error });
          await new Promise((resolve) => setTimeout(resolve, delayMs));
        }
      }
    }) as EIP1193RequestFn;
    const config: TransportConfig = { ...inner.config, retryCount: 0 };
    return {
      config,
      request,
      value: { ...inner.value, url: urls[0], urls: providers.map((p) => p.name) },
    };
  };
}
