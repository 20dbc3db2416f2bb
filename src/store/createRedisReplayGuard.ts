import { createHash } from "node:crypto";
import type { Logger } from "pino";
import { createClient } from "redis";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import {
  checkClaimRequest,
  claimRequestHash,
  newClaimToken,
  type ReplayGuard,
  replayKeyHash,
} from "./replayGuard.ts";

/** The Redis commands the guard needs; a connected client of the `redis` package satisfies it. */
export type RedisReplayClient = {
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  set(
    key: string,
    value: string,
    options: { condition: "NX"; expiration: { type: "PXAT"; value: number } },
  ): Promise<unknown>;
};

export type RedisReplayGuardOptions = (
  | { /** `redis://…`: the guard opens, owns and closes its own client. */ url: string }
  | { /** A connected client owned by the caller (not closed by the guard). */ client: RedisReplayClient }
) & {
  /** Namespace for the guard's keys (default `tollgate:replay:`). */
  prefix?: string;
  clock?: Clock;
  /**
   * Extra time Redis keeps a key past its memo's expiry (default 60 s). Redis expires keys by its own
   * clock while the gate judges memo expiry by the gate host's clock; the margin keeps a key
   * remembered for as long as any gate with a clock that far behind would still accept its memo.
   */
  skewToleranceMs?: number;
  logger?: Logger | undefined;
};

/**
 * A replay guard shared by every gate instance using one Redis: `SET key 1 NX PXAT expiry` is one
 * atomic command that succeeds for exactly one caller, and Redis itself drops the key when it expires.
 * Claims, settling and releasing are Lua scripts, each atomic on its key. Keys are `prefix` +
 * base64url(sha256(memo)); a key used for good holds `1`, a claim
 * `c|<lease until ms>|<claims>|<token>|<sha256 of the request, hex>`.
 * @example
 * const guard = await createRedisReplayGuard({ url: env.REDIS_URL, logger });
 */
export async function createRedisReplayGuard(
  options: RedisReplayGuardOptions,
): Promise<ReplayGuard & { close(): Promise<void> }> {
  const prefix = options.prefix ?? "tollgate:replay:";
  const clock = options.clock ?? systemClock;
  const skewToleranceMs = options.skewToleranceMs ?? 60_000;
  let client: RedisReplayClient;
  let owned: { close(): Promise<void> } | undefined;
  if ("url" in options) {
    const created = createClient({ url: options.url });
    // Connection errors are emitted as events; unhandled they would crash the process. The client
    // reconnects by itself and commands fail meanwhile, which `consume` reports as a fault.
    created.on("error", (error: unknown) =>
      options.logger?.warn({ err: error }, "Redis replay guard connection error"),
    );
    await created.connect();
    client = created;
    owned = created;
  } else {
    client = options.client;
  }

  const redisKey = (key: string) => `${prefix}${replayKeyHash(key).toString("base64url")}`;
  const run = async (script: string, key: string, args: string[]): Promise<unknown> => {
    try {
      return await client.evalSha(sha1(script), { keys: [key], arguments: args });
    } catch (error) {
      if (!String((error as Error)?.message ?? "").includes("NOSCRIPT")) throw error;
      return await client.eval(script, { keys: [key], arguments: args });
    }
  };
  return {
    async consume(key, expiresAtMs) {
      checkExpiry(expiresAtMs);
      if (expiresAtMs <= clock.now()) return false;
      const reply = await client.set(redisKey(key), "1", {
        condition: "NX",
        expiration: { type: "PXAT", value: expiresAtMs + skewToleranceMs },
      });
      return reply === "OK";
    },
    async claim(key, expiresAtMs, claim) {
      checkExpiry(expiresAtMs);
      checkClaimRequest(claim);
      const now = clock.now();
      if (expiresAtMs <= now) return { ok: false, reason: "used" };
      const token = newClaimToken();
      const reply = (await run(CLAIM_LUA, redisKey(key), [
        String(now),
        String(now + claim.leaseMs),
        String(expiresAtMs + skewToleranceMs),
        claimRequestHash(claim.request),
        token,
        String(claim.maxClaims),
      ])) as [number, number];
      if (reply[0] === 1) return { ok: true, token };
      if (reply[0] === 2) return { ok: false, reason: "in-flight", retryAfterMs: Number(reply[1]) };
      return { ok: false, reason: "used" };
    },
    async settle(key, expiresAtMs) {
      checkExpiry(expiresAtMs);
      if (expiresAtMs <= clock.now()) return;
      await run(SETTLE_LUA, redisKey(key), [String(expiresAtMs + skewToleranceMs)]);
    },
    async release(key, token) {
      await run(RELEASE_LUA, redisKey(key), [token ?? ""]);
    },
    async close() {
      await owned?.close();
    },
  };
}

function checkExpiry(expiresAtMs: number): void {
  if (!Number.isSafeInteger(expiresAtMs)) {
    throw new TollgateError(ErrorCode.Internal, `expiresAtMs must be an integer: ${expiresAtMs}`);
  }
}

const sha1 = (script: string) => createHash("sha1").update(script).digest("hex");

/**
 * KEYS[1] the key; ARGV now, lease until, key expiry (PXAT), request hash, token, max claims.
 * Replies {1, 0} won, {2, ms left} in flight for this request, {0, 0} used.
 */
const CLAIM_LUA = `
local v = redis.call('GET', KEYS[1])
local function put(claims)
  redis.call('SET', KEYS[1], 'c|' .. ARGV[2] .. '|' .. claims .. '|' .. ARGV[5] .. '|' .. ARGV[4], 'PXAT', ARGV[3])
end
if not v then
  put(1)
  return {1, 0}
end
local lease, claims, _, request = string.match(v, '^c|(%d+)|(%d+)|([^|]+)|(%x+)$')
if not lease or request ~= ARGV[4] then return {0, 0} end
local left = tonumber(lease) - tonumber(ARGV[1])
if left > 0 then return {2, left} end
if tonumber(claims) >= tonumber(ARGV[6]) then return {0, 0} end
put(tonumber(claims) + 1)
return {1, 0}
`;

/** KEYS[1] the key; ARGV key expiry (PXAT). Used for good, whoever held it. */
const SETTLE_LUA = `redis.call('SET', KEYS[1], '1', 'PXAT', ARGV[1]) return 1`;

/** KEYS[1] the key; ARGV the claim's token, or '' for a key used by `consume`. */
const RELEASE_LUA = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if ARGV[1] == '' then
  if v == '1' then return redis.call('DEL', KEYS[1]) end
  return 0
end
if string.match(v, '^c|%d+|%d+|([^|]+)|') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;
