import type { Logger } from "pino";
import { createClient } from "redis";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import { type ReplayGuard, replayKeyHash } from "./replayGuard.ts";

/** The Redis commands the guard needs; a connected client of the `redis` package satisfies it. */
export type RedisReplayClient = {
  del(key: string): Promise<unknown>;
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
 * Keys are `prefix` + base64url(sha256(memo)).
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
  return {
    async consume(key, expiresAtMs) {
      if (!Number.isSafeInteger(expiresAtMs)) {
        throw new TollgateError(ErrorCode.Internal, `expiresAtMs must be an integer: ${expiresAtMs}`);
      }
      if (expiresAtMs <= clock.now()) return false;
      const reply = await client.set(redisKey(key), "1", {
        condition: "NX",
        expiration: { type: "PXAT", value: expiresAtMs + skewToleranceMs },
      });
      return reply === "OK";
    },
    async release(key) {
      await client.del(redisKey(key));
    },
    async close() {
      await owned?.close();
    },
  };
}
