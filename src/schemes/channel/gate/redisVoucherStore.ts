/**
 * A voucher store shared by several gate instances of one seller through Redis. Each channel is a hash
 * (`<prefix><channelId>`: `h` highest, `s` spent, `f` forwarded, `fl` floor, `sig` signature, `x` = `1`
 * once sealed for a cooperative close) and a set
 * (`<prefix>pending`) lists channels holding a voucher not yet forwarded; `<prefix>tag` is the store's
 * tag, made by the first instance that asks. Every operation is one Lua
 * script, which Redis runs atomically: a charge reads and writes a channel with nothing in between.
 * Amounts are uint256, beyond Lua's doubles, so the scripts compare and add canonical decimal strings.
 * A charge resolves once Redis has acknowledged the write; durability across a Redis restart is
 * Redis's own (AOF with `appendfsync always` or `everysec`: docs/channels.md "Stores").
 */
import { createHash } from "node:crypto";
import type { Logger } from "pino";
import { createClient } from "redis";
import type { Hex } from "viem";
import { base64UrlDecode, base64UrlEncode } from "../../../protocol/base64.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import {
  type ChannelTally,
  type ForwardableVoucher,
  newChannelTag,
  type VoucherStore,
} from "./voucherStore.ts";

/** The Redis commands the store needs; a connected client of the `redis` package satisfies it. */
export type RedisVoucherClient = {
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
};

export type RedisVoucherStoreOptions = (
  | { /** `redis://…`: the store opens, owns and closes its own client. */ url: string }
  | { /** A connected client owned by the caller. */ client: RedisVoucherClient }
) & {
  /** Namespace of the store's keys (default `tollgate:channel:`); one per seller. */
  prefix?: string;
  logger?: Logger | undefined;
};

// Decimal-string arithmetic on canonical non-negative integers (no leading zeros).
const DECIMAL_LUA = `
local function cmp(a, b)
  if #a ~= #b then if #a < #b then return -1 else return 1 end end
  if a == b then return 0 end
  if a < b then return -1 else return 1 end
end
local function add(a, b)
  local out, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then d = d + string.byte(a, i) - 48; i = i - 1 end
    if j > 0 then d = d + string.byte(b, j) - 48; j = j - 1 end
    out[#out + 1] = string.char(48 + d % 10)
    carry = math.floor(d / 10)
  end
  local s = string.reverse(table.concat(out))
  return s
end
local function sub(a, b)
  local out, borrow, i, j = {}, 0, #a, #b
  while i > 0 do
    local d = string.byte(a, i) - 48 - borrow
    if j > 0 then d = d - (string.byte(b, j) - 48); j = j - 1 end
    if d < 0 then d = d + 10; borrow = 1 else borrow = 0 end
    out[#out + 1] = string.char(48 + d)
    i = i - 1
  end
  local s = string.reverse(table.concat(out)):gsub("^0+", "")
  if s == "" then return "0" end
  return s
end
`;

// KEYS[1] channel hash, KEYS[2] pending set; ARGV: channelId, cumulative, signature, price, floor.
const CHARGE_LUA = `${DECIMAL_LUA}
local h = redis.call('HGET', KEYS[1], 'h')
local s, sig
if h == false then
  h = ARGV[5]; s = ARGV[5]
  redis.call('HSET', KEYS[1], 'h', h, 's', s, 'f', h, 'fl', h, 'sig', '')
else
  s = redis.call('HGET', KEYS[1], 's')
  if redis.call('HGET', KEYS[1], 'x') == '1' then return {2, h, s} end
end
local v = ARGV[2]
local nh = h
if cmp(v, h) > 0 then nh = v end
local ns = add(s, ARGV[4])
if cmp(ns, nh) > 0 then return {0, h, s} end
if nh ~= h then
  redis.call('HSET', KEYS[1], 'h', nh, 's', ns, 'sig', ARGV[3])
  redis.call('SADD', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], 's', ns)
end
return {1, nh, ns}
`;

// KEYS[1] channel hash; ARGV: price.
const REFUND_LUA = `${DECIMAL_LUA}
local s = redis.call('HGET', KEYS[1], 's')
if s == false then return 0 end
local fl = redis.call('HGET', KEYS[1], 'fl')
local ns = fl
if cmp(s, add(fl, ARGV[1])) >= 0 then ns = sub(s, ARGV[1]) end
redis.call('HSET', KEYS[1], 's', ns)
return 1
`;

// KEYS[1] channel hash, KEYS[2] pending set; ARGV: channelId, amount.
const MARK_LUA = `${DECIMAL_LUA}
local h = redis.call('HGET', KEYS[1], 'h')
if h == false then return 0 end
local f = redis.call('HGET', KEYS[1], 'f')
if cmp(ARGV[2], f) <= 0 or cmp(ARGV[2], h) > 0 then return 0 end
redis.call('HSET', KEYS[1], 'f', ARGV[2])
if cmp(ARGV[2], h) == 0 then redis.call('SREM', KEYS[2], ARGV[1]) end
return 1
`;

// KEYS[1] the tag's key; ARGV: a fresh tag, kept only when the store has none yet.
const TAG_LUA = `
local t = redis.call('GET', KEYS[1])
if t then return t end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`;

// KEYS[1] pending set; ARGV: prefix, limit. Returns flat [id, highest, signature, …].
const PENDING_LUA = `
local ids = redis.call('SRANDMEMBER', KEYS[1], tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local r = redis.call('HMGET', ARGV[1] .. id, 'h', 'f', 'sig')
  if r[1] and r[1] ~= r[2] and r[3] and r[3] ~= '' then
    out[#out + 1] = id; out[#out + 1] = r[1]; out[#out + 1] = r[3]
  end
end
return out
`;

// KEYS[1] channel hash; ARGV: floor. Returns {highest, spent}.
const SEAL_LUA = `
local h = redis.call('HGET', KEYS[1], 'h')
if h == false then
  redis.call('HSET', KEYS[1], 'h', ARGV[1], 's', ARGV[1], 'f', ARGV[1], 'fl', ARGV[1], 'sig', '')
end
redis.call('HSET', KEYS[1], 'x', '1')
return redis.call('HMGET', KEYS[1], 'h', 's')
`;

// KEYS[1] channel hash.
const TALLY_LUA = `return redis.call('HMGET', KEYS[1], 'h', 's')`;

const sha1 = (script: string) => createHash("sha1").update(script).digest("hex");

const ID = /^0x[0-9a-f]{64}$/;
const DECIMAL = /^(0|[1-9][0-9]*)$/;

function decimal(value: unknown): bigint {
  const text = typeof value === "string" ? value : String(value);
  if (!DECIMAL.test(text))
    throw new TollgateError("Internal", "Redis voucher store holds a non-decimal amount");
  return BigInt(text);
}

/** The store's client: the caller's, or one opened (and owned, so closed with the store) from `url`. */
async function redisClientOf(
  options: RedisVoucherStoreOptions,
): Promise<{ client: RedisVoucherClient; owned: { close(): Promise<void> } | undefined }> {
  if (!("url" in options)) return { client: options.client, owned: undefined };
  const created = createClient({ url: options.url });
  created.on("error", (error: unknown) => options.logger?.warn({ err: error }, "Redis voucher store error"));
  await created.connect();
  return { client: created as unknown as RedisVoucherClient, owned: created };
}

/** `PENDING_LUA`'s flat reply as vouchers; an entry whose id is malformed is skipped. */
function vouchersOf(flat: string[]): ForwardableVoucher[] {
  const out: ForwardableVoucher[] = [];
  for (let i = 0; i + 2 < flat.length; i += 3) {
    const channelId = String(flat[i]);
    if (!ID.test(channelId)) continue;
    out.push({
      channelId: channelId as Hex,
      cumulativeAmount: decimal(flat[i + 1]),
      signature: base64UrlDecode(String(flat[i + 2])),
    });
  }
  return out;
}

/**
 * @example
 * const store = await createRedisVoucherStore({ url: env.REDIS_URL, prefix: "tollgate:channel:seller-1:" });
 */
export async function createRedisVoucherStore(options: RedisVoucherStoreOptions): Promise<VoucherStore> {
  const prefix = options.prefix ?? "tollgate:channel:";
  const { client, owned } = await redisClientOf(options);
  const pending = `${prefix}pending`;
  let tag: Hex | undefined;

  const run = async (script: string, keys: string[], args: string[]): Promise<unknown> => {
    try {
      return await client.evalSha(sha1(script), { keys, arguments: args });
    } catch (error) {
      if (!String((error as Error)?.message ?? "").includes("NOSCRIPT")) throw error;
      return await client.eval(script, { keys, arguments: args });
    }
  };
  const tallyOf = (reply: unknown[]): ChannelTally => ({
    highest: decimal(reply[1]),
    spent: decimal(reply[2]),
  });

  return {
    async charge(input) {
      const reply = (await run(
        CHARGE_LUA,
        [prefix + input.channelId, pending],
        [
          input.channelId,
          input.cumulativeAmount.toString(),
          base64UrlEncode(input.signature),
          input.price.toString(),
          input.floor.toString(),
        ],
      )) as unknown[];
      const code = Number(reply[0]);
      return { charged: code === 1, tally: tallyOf(reply), ...(code === 2 ? { sealed: true } : {}) };
    },
    async refund(channelId, price) {
      await run(REFUND_LUA, [prefix + channelId], [price.toString()]);
    },
    async tally(channelId) {
      const reply = (await run(TALLY_LUA, [prefix + channelId], [])) as unknown[];
      if (reply[0] === null || reply[0] === undefined) return undefined;
      return { highest: decimal(reply[0]), spent: decimal(reply[1]) };
    },
    async unforwarded(limit) {
      return vouchersOf((await run(PENDING_LUA, [pending], [prefix, String(limit)])) as string[]);
    },
    async markForwarded(channelId, cumulativeAmount) {
      await run(MARK_LUA, [prefix + channelId, pending], [channelId, cumulativeAmount.toString()]);
    },
    async seal(channelId, floor) {
      const reply = (await run(SEAL_LUA, [prefix + channelId], [floor.toString()])) as unknown[];
      return { highest: decimal(reply[0]), spent: decimal(reply[1]) };
    },
    async tag() {
      if (tag !== undefined) return tag;
      const reply = String(await run(TAG_LUA, [`${prefix}tag`], [newChannelTag()]));
      if (!/^0x[0-9a-f]{16}$/.test(reply)) {
        throw new TollgateError("Internal", "the Redis voucher store holds a malformed tag");
      }
      tag = reply as Hex;
      return tag;
    },
    async close() {
      await owned?.close();
    },
  };
}
