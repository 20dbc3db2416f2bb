/**
 * The facilitator's rate limits (docs/facilitator.md, "Abuse: minimum amount and rate limits"; 429 `RateLimited` with `Retry-After`, docs/protocol.md, "Errors"):
 * one bucket per client address for every request to an endpoint that costs chain work (a simulation,
 * a transaction), and one per payer address for every payment that passed the off-chain checks.
 *
 * Why two: a client address limit is taken before anything is parsed, so it bounds what one host can
 * make the facilitator do; a payer limit bounds one key spread over many hosts. The payer bucket is
 * taken only after the signature recovered to the payer, so nobody can exhaust another payer's bucket
 * by sending junk in its name.
 *
 * A request carrying an active provider API key (`Authorization: Bearer tg_…`, as a gate sends its
 * channel reads and voucher forwards) is counted against that provider's bucket instead of the
 * anonymous per-address one, so strangers sharing, or flooding from, a gate's address cannot spend the
 * gate's allowance; and against a per-address bucket of keyed requests, which bounds a host that
 * registers many providers (registration is free) to a few providers' allowance. A key that is
 * unknown or revoked is no key: the request takes the anonymous bucket. A stranger's own key spends
 * only its own provider's bucket, since the bucket is named by the provider the key was issued to.
 *
 * Client address: the TCP peer's address. `X-Forwarded-For` is read only when the peer is one of the
 * configured `trustedProxies` (the facilitator sits behind them); then the client is the right-most
 * address of the header that is not itself a trusted proxy, since every proxy appends the address it
 * saw and only the right-most entries were written by proxies we trust. IPv6 clients are limited per
 * /64 (one host commonly holds a whole /64), IPv4-mapped IPv6 addresses as IPv4.
 *
 * Limits hold per facilitator process: N instances behind a load balancer allow N times the rate.
 */
import { isIP } from "node:net";
import type { MiddlewareHandler } from "hono";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { createTokenBuckets, type TokenBucketRule, type TokenBuckets } from "./tokenBucket.ts";

export type RateLimitOptions = {
  /** Per client address; `false` turns the limit off. Default 120 at once, 20 per second. */
  perClient?: TokenBucketRule | false | undefined;
  /** Per payer address; `false` turns the limit off. Default 60 at once, 10 per second. */
  perPayer?: TokenBucketRule | false | undefined;
  /**
   * Per provider, for requests carrying its active API key (instead of `perClient`); `false` turns the
   * limit off. Default 600 at once, 100 per second.
   */
  perProvider?: TokenBucketRule | false | undefined;
  /**
   * Per client address, for requests carrying an active API key of any provider; `false` turns the
   * limit off. Default 1 200 at once, 200 per second.
   */
  perKeyedClient?: TokenBucketRule | false | undefined;
  /**
   * Addresses of the reverse proxies in front of the facilitator, whose `X-Forwarded-For` is believed.
   * Empty (the default) believes no header: the TCP peer is the client.
   */
  trustedProxies?: readonly string[] | undefined;
  /** Buckets held per limit (default 100 000; the least recently used is dropped past it). */
  maxKeys?: number | undefined;
};

export const defaultClientLimit: TokenBucketRule = { capacity: 120, refillPerSecond: 20 };
export const defaultPayerLimit: TokenBucketRule = { capacity: 60, refillPerSecond: 10 };
export const defaultProviderLimit: TokenBucketRule = { capacity: 600, refillPerSecond: 100 };
export const defaultKeyedClientLimit: TokenBucketRule = { capacity: 1_200, refillPerSecond: 200 };

/** A provider API key's shape (`tg_` and 32 base64url characters): anything else is not looked up. */
const BEARER_KEY = /^Bearer\s+(tg_[A-Za-z0-9_-]{32})\s*$/i;

export type RateLimits = {
  /**
   * Hono middleware: takes the client address's bucket for a POST or a channel read — or, with an
   * active provider API key, the provider's and the keyed requests' bucket — or answers 429.
   */
  clientMiddleware: MiddlewareHandler;
  /** Takes the client address's bucket for a request (`peer` = TCP peer address, if known). */
  takeClient(peer: string | undefined, forwardedFor: string | undefined): void;
  /** Takes the payer's bucket; call only once the payment's signature recovered to `payer`. */
  takePayer(payer: string): void;
};

export type RateLimitDeps = {
  clock: Clock;
  /**
   * The provider holding an active API key (requireProvider.ts's `findProviderByApiKey` over the
   * store). Without it every request is anonymous and takes `perClient`.
   */
  findProvider?: ((apiKey: string) => Promise<{ address: string } | undefined>) | undefined;
};

export function createRateLimits(options: RateLimitOptions & RateLimitDeps): RateLimits {
  const { clock } = options;
  const buckets = (rule: TokenBucketRule | false | undefined, fallback: TokenBucketRule) =>
    rule === false
      ? undefined
      : createTokenBuckets({ ...(rule ?? fallback), clock, maxKeys: options.maxKeys });
  const clients: TokenBuckets | undefined = buckets(options.perClient, defaultClientLimit);
  const payers: TokenBuckets | undefined = buckets(options.perPayer, defaultPayerLimit);
  const providers: TokenBuckets | undefined = buckets(options.perProvider, defaultProviderLimit);
  const keyedClients: TokenBuckets | undefined = buckets(options.perKeyedClient, defaultKeyedClientLimit);
  const findProvider = options.findProvider;
  const trusted = new Set((options.trustedProxies ?? []).map((a) => normalizeAddress(a) ?? a));

  const refuse = (what: string, retryAfter: number, details: Record<string, unknown>): never => {
    throw new TollgateError("RateLimited", `too many requests ${what}; retry after ${retryAfter} s`, {
      retryAfter,
      details,
    });
  };

  const takeClient = (peer: string | undefined, forwardedFor: string | undefined) => {
    if (clients === undefined) return;
    const client = clientAddress(peer, forwardedFor, trusted);
    const taken = clients.take(bucketKey(client));
    if (!taken.ok) refuse("from this client address", taken.retryAfterSeconds, { limit: "client" });
  };

  /**
   * The buckets of a request with a provider API key: false when the key is not an active one (the
   * caller takes the anonymous bucket then). The key is looked up before any bucket is taken, so a
   * stranger sending made-up keys from a gate's address spends nothing of the gate's: an indexed read
   * by the key's hash, as every provider endpoint makes for any key it is sent.
   */
  const takeProvider = async (
    authorization: string | undefined,
    peer: string | undefined,
    forwardedFor: string | undefined,
  ): Promise<boolean> => {
    if (findProvider === undefined || authorization === undefined) return false;
    const key = BEARER_KEY.exec(authorization)?.[1];
    if (key === undefined) return false;
    // A store that cannot answer now makes the request anonymous rather than failing it: a channel
    // read needs no store, and the per-address bucket still bounds it.
    const provider = await findProvider(key).catch(() => undefined);
    if (provider === undefined) return false;
    const client = keyedClients?.take(bucketKey(clientAddress(peer, forwardedFor, trusted)));
    if (client !== undefined && !client.ok) {
      refuse("with provider keys from this client address", client.retryAfterSeconds, {
        limit: "keyedClient",
      });
    }
    const taken = providers?.take(provider.address.toLowerCase());
    if (taken !== undefined && !taken.ok) {
      refuse("for this provider", taken.retryAfterSeconds, { limit: "provider", provider: provider.address });
    }
    return true;
  };

  return {
    takeClient,
    takePayer(payer) {
      if (payers === undefined) return;
      const taken = payers.take(payer.toLowerCase());
      if (!taken.ok) refuse("for this payer", taken.retryAfterSeconds, { limit: "payer", payer });
    },
    clientMiddleware: async (c, next) => {
      // The endpoints that cost chain work are POSTs, and the channel read, which is an eth_call per
      // request (a gate reads a channel once and caches it). Subscription reads are not limited here,
      // so a gate serving many subscribers from one address is never refused.
      const costly =
        c.req.method === "POST" || (c.req.method === "GET" && c.req.path.startsWith("/channels/"));
      if (costly) {
        const peer = peerAddressOf(c.env);
        const forwardedFor = c.req.header("x-forwarded-for");
        const keyed = await takeProvider(c.req.header("authorization"), peer, forwardedFor);
        if (!keyed) takeClient(peer, forwardedFor);
      }
      await next();
    },
  };
}

/**
 * The TCP peer of a request served by `@hono/node-server` (`c.env.incoming` is the Node request).
 * Undefined when the app is called in process (`app.request()`), which has no peer.
 */
export function peerAddressOf(env: unknown): string | undefined {
  const incoming = (env as { incoming?: { socket?: { remoteAddress?: unknown } } } | undefined)?.incoming;
  const address = incoming?.socket?.remoteAddress;
  return typeof address === "string" ? address : undefined;
}

/** An IP address in one spelling: IPv4-mapped IPv6 as IPv4, IPv6 lowercased; undefined if not an IP. */
export function normalizeAddress(text: string): string | undefined {
  const trimmed = text.trim().replace(/^\[(.*)\]$/, "$1");
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(trimmed);
  const address = mapped?.[1] ?? trimmed;
  const kind = isIP(address);
  if (kind === 4) return address;
  if (kind === 6) return address.toLowerCase();
  return undefined;
}

/**
 * The client a request comes from: the peer, unless the peer is a trusted proxy; then the right-most
 * `X-Forwarded-For` entry that is not a trusted proxy (an entry that is not an IP address stops the
 * walk: it was written by someone we do not trust, so the last trusted hop's view is used).
 */
export function clientAddress(
  peer: string | undefined,
  forwardedFor: string | undefined,
  trustedProxies: ReadonlySet<string>,
): string {
  const direct = peer === undefined ? undefined : normalizeAddress(peer);
  if (direct === undefined) return "unknown";
  if (!trustedProxies.has(direct) || forwardedFor === undefined) return direct;
  let client = direct;
  const hops = forwardedFor.split(",").reverse();
  for (const hop of hops) {
    const address = normalizeAddress(hop);
    if (address === undefined) break;
    client = address;
    if (!trustedProxies.has(address)) break;
  }
  return client;
}

/** The bucket of an address: an IPv4 address alone, an IPv6 address by its /64. */
export function bucketKey(address: string): string {
  if (isIP(address) !== 6) return address;
  const expanded = expandIpv6(address);
  return `${expanded.slice(0, 4).join(":")}::/64`;
}

function expandIpv6(address: string): string[] {
  // An embedded IPv4 tail (::1.2.3.4) takes two groups; only the first four groups matter here.
  const withoutV4 = address.replace(/(\d+\.\d+\.\d+\.\d+)$/, "0:0");
  const [head = "", tail] = withoutV4.split("::");
  const headGroups = head === "" ? [] : head.split(":");
  const tailGroups = tail === undefined || tail === "" ? [] : tail.split(":");
  const fill = tail === undefined ? [] : Array(8 - headGroups.length - tailGroups.length).fill("0");
  return [...headGroups, ...fill, ...tailGroups].map((g) => g.replace(/^0+(?=.)/, ""));
}
