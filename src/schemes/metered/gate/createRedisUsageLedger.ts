/**
 * A usage ledger shared by every gate instance using one Redis, with leased allowance (usageLeases.ts;
 * wrap it in `createLeasedUsageLedger`). Every key of one ledger carries the hash tag `{name}`.
 *
 * - The rules are the TypeScript ones (`applyDirectUsage`, `grantSize`, `endLease`) with bigint money:
 *   a change reads a snapshot, applies the rule, and commits with a Lua compare-and-set on the cycle's
 *   version, the ledger's unsettled figure (and a lease's spent units); a lost race is retried.
 * - Spends into leases are one Lua script for every use in flight: each lease takes its units only
 *   while active, unexpired by Redis's clock (`TIME`) and within its block (fencing).
 * - Batches, items and outcomes follow the PostgreSQL ledger: a pending charge goes into one batch,
 *   a stale batch is resent with the same refs (`usageRef`), a resolved item lowers `unsettled` once.
 *
 * Amounts are stored as decimal integers; `unsettled` is moved by `HINCRBY`, so it must stay below
 * 2^63 smallest units (9.2·10^12 USDC): the ledger bounds `maxUnsettled` there. Durability across a
 * Redis restart is Redis's own (AOF with `appendfsync always` or `everysec`; docs/gate.md).
 */
import { createHash, randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { createClient } from "redis";
import { type Clock, systemClock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import {
  applyDirectUsage,
  endLease,
  firstUseOf,
  grantSize,
  type SharedCycle,
  type SharedUsageLedger,
  type StoredLease,
} from "./usageLeases.ts";
import { type UsageBatchItem, type UsageCycle, type UsageRequest, usageRef } from "./usageLedger.ts";

/** The Redis commands the ledger needs; a connected client of the `redis` package satisfies it. */
export type RedisUsageClient = {
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
};

export type RedisUsageLedgerOptions = (
  | { /** `redis://…`: the ledger opens, owns and closes its own client. */ url: string }
  | { /** A connected client owned by the caller. */ client: RedisUsageClient }
) & {
  /** Gates that count one API's usage together share a name (default `default`). */
  name?: string;
  /** Namespace of the keys (default `tollgate:usage:`). */
  prefix?: string;
  clock?: Clock;
  logger?: Logger | undefined;
};

const MAX_UNSETTLED = 2n ** 62n;
/** Compare-and-set attempts before a change is reported as a fault. */
const MAX_CAS_ATTEMPTS = 200;

const NOW_LUA = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

const SNAPSHOT_LUA = `
return { redis.call('HMGET', KEYS[1], 'ps', 'pe', 'units', 'overage', 'pending', 'leased', 'epoch', 'v'),
  redis.call('HGET', KEYS[2], 'u') or '0' }`;

// KEYS: cycle, ledger, pending set, lease key prefix, leases zset.
// ARGV: v, u, sub, ps, pe, units, overage, pending, leased, epoch, u', [ttl, units, spent, base, inc, price, worst]
const COMMIT_LUA = `
local v = redis.call('HGET', KEYS[1], 'v') or ''
if v ~= ARGV[1] then return {0} end
if (redis.call('HGET', KEYS[2], 'u') or '0') ~= ARGV[2] then return {0} end
local nv = 1
if v ~= '' then nv = tonumber(v) + 1 end
redis.call('HSET', KEYS[1], 'ps', ARGV[4], 'pe', ARGV[5], 'units', ARGV[6], 'overage', ARGV[7],
  'pending', ARGV[8], 'leased', ARGV[9], 'epoch', ARGV[10], 'v', nv)
redis.call('HSET', KEYS[2], 'u', ARGV[11])
if ARGV[8] ~= '0' then redis.call('SADD', KEYS[3], ARGV[3]) else redis.call('SREM', KEYS[3], ARGV[3]) end
if #ARGV > 11 then
  ${NOW_LUA}
  local id = redis.call('HINCRBY', KEYS[2], 'nl', 1)
  local exp = now + tonumber(ARGV[12])
  redis.call('HSET', KEYS[4] .. id, 'sub', ARGV[3], 'epoch', ARGV[10], 'units', ARGV[13], 'spent', ARGV[14],
    'base', ARGV[15], 'inc', ARGV[16], 'price', ARGV[17], 'worst', ARGV[18], 'state', 'active', 'exp', exp)
  redis.call('ZADD', KEYS[5], exp, id)
  return {1, tostring(id)}
end
return {1}`;

// KEYS: leases zset. ARGV: lease key prefix, then lease id and units pairs.
const SPEND_LUA = `
${NOW_LUA}
local out = {}
for i = 2, #ARGV, 2 do
  local k = ARGV[1] .. ARGV[i]
  local l = redis.call('HMGET', k, 'state', 'exp', 'spent', 'units')
  if l[1] == 'active' and tonumber(l[2]) > now and tonumber(l[3]) + tonumber(ARGV[i + 1]) <= tonumber(l[4]) then
    redis.call('HINCRBY', k, 'spent', ARGV[i + 1])
    out[#out + 1] = ARGV[i]
  end
end
return out`;

// KEYS: lease. ARGV: cycle key prefix, ledger key.
const READ_LEASE_LUA = `
local l = redis.call('HMGET', KEYS[1], 'state', 'sub', 'epoch', 'units', 'spent', 'base', 'inc', 'price', 'worst', 'exp')
if l[1] ~= 'active' then return {} end
return { l, redis.call('HMGET', ARGV[1] .. l[2], 'ps', 'pe', 'units', 'overage', 'pending', 'leased', 'epoch', 'v'),
  redis.call('HGET', ARGV[2], 'u') or '0' }`;

// KEYS: cycle, ledger, pending set, lease, leases zset.
// ARGV: v, u, spent, onlyExpired, state, sub, id, u', hasCycle, ps, pe, units, overage, pending, leased, epoch
const END_LUA = `
local l = redis.call('HMGET', KEYS[4], 'state', 'spent', 'exp')
if l[1] ~= 'active' then return 2 end
if l[2] ~= ARGV[3] then return 0 end
if ARGV[4] == '1' then
  ${NOW_LUA}
  if tonumber(l[3]) > now then return 3 end
end
if (redis.call('HGET', KEYS[1], 'v') or '') ~= ARGV[1] then return 0 end
if (redis.call('HGET', KEYS[2], 'u') or '0') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[4], 'state', ARGV[5])
redis.call('ZREM', KEYS[5], ARGV[7])
redis.call('HSET', KEYS[2], 'u', ARGV[8])
if ARGV[9] == '1' then
  redis.call('HSET', KEYS[1], 'ps', ARGV[10], 'pe', ARGV[11], 'units', ARGV[12], 'overage', ARGV[13],
    'pending', ARGV[14], 'leased', ARGV[15], 'epoch', ARGV[16])
  redis.call('HINCRBY', KEYS[1], 'v', 1)
  if ARGV[14] ~= '0' then redis.call('SADD', KEYS[3], ARGV[6]) else redis.call('SREM', KEYS[3], ARGV[6]) end
end
return 1`;

// KEYS: ledger, claimed zset, pending set. ARGV: now, stale cutoff, max items, batch prefix, cycle prefix.
const CLAIM_LUA = `
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2], 'LIMIT', 0, 1)
if #stale > 0 then
  redis.call('ZADD', KEYS[2], ARGV[1], stale[1])
  return { stale[1], redis.call('HGET', ARGV[4] .. stale[1], 'items') }
end
local subs = redis.call('SMEMBERS', KEYS[3])
table.sort(subs)
local items, n = {}, 0
for _, sub in ipairs(subs) do
  if n >= tonumber(ARGV[3]) then break end
  local ck = ARGV[5] .. sub
  local p = redis.call('HGET', ck, 'pending')
  if p and p ~= '0' then
    items[#items + 1] = sub .. ':' .. p
    redis.call('HSET', ck, 'pending', '0')
    redis.call('HINCRBY', ck, 'v', 1)
    n = n + 1
  end
  redis.call('SREM', KEYS[3], sub)
end
if n == 0 then return {} end
local id = tostring(redis.call('HINCRBY', KEYS[1], 'nb', 1))
redis.call('HSET', ARGV[4] .. id, 'st', 'claimed', 'items', table.concat(items, ','))
redis.call('ZADD', KEYS[2], ARGV[1], id)
return { id, table.concat(items, ',') }`;

// ARGV: item prefix, batch id, then ref, sub, amount triples. Records items not yet recorded.
const ITEMS_LUA = `
for i = 3, #ARGV, 3 do
  local k = ARGV[1] .. ARGV[i]
  if redis.call('EXISTS', k) == 0 then
    redis.call('HSET', k, 'sub', ARGV[i + 1], 'amount', ARGV[i + 2], 'st', 'claimed', 'batch', ARGV[2])
  end
end
return 1`;

// KEYS: batch, claimed zset, sent zset. ARGV: batch id, now, item prefix, refs…
const MARK_LUA = `
if redis.call('HGET', KEYS[1], 'st') ~= 'claimed' then return 0 end
redis.call('HSET', KEYS[1], 'st', 'sent')
redis.call('ZREM', KEYS[2], ARGV[1])
for i = 4, #ARGV do
  local k = ARGV[3] .. ARGV[i]
  if redis.call('HGET', k, 'st') == 'claimed' then
    redis.call('HSET', k, 'st', 'sent', 'sent', ARGV[2])
    redis.call('ZADD', KEYS[3], ARGV[2], ARGV[i])
  end
end
return 1`;

// KEYS: ledger, sent zset. ARGV: item prefix, then ref and outcome pairs.
const RESOLVE_LUA = `
local n = 0
for i = 2, #ARGV, 2 do
  local k = ARGV[1] .. ARGV[i]
  local st = redis.call('HGET', k, 'st')
  if st == 'claimed' or st == 'sent' then
    redis.call('HSET', k, 'st', ARGV[i + 1])
    redis.call('ZREM', KEYS[2], ARGV[i])
    redis.call('HINCRBY', KEYS[1], 'u', '-' .. redis.call('HGET', k, 'amount'))
    n = n + 1
  end
end
return n`;

// KEYS: sent zset. ARGV: cutoff, limit, item prefix.
const UNRESOLVED_LUA = `
local refs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, ref in ipairs(refs) do
  local item = redis.call('HMGET', ARGV[3] .. ref, 'sub', 'amount')
  out[#out + 1] = { ref, item[1], item[2] }
end
return out`;

// KEYS: leases zset. ARGV: limit.
const EXPIRED_LUA = `
${NOW_LUA}
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))`;

const sha1 = (script: string) => createHash("sha1").update(script).digest("hex");
const text = (value: unknown): string => (typeof value === "string" ? value : String(value ?? ""));

/** A cycle snapshot as read: the rule's input and the version to compare. */
type Snapshot = { cycle: SharedCycle | undefined; version: string; unsettled: string };

function snapshotOf(fields: unknown[], unsettled: unknown): Snapshot {
  const [ps, pe, units, overage, pending, leased, epoch, v] = fields.map((f) =>
    f === null || f === undefined ? undefined : text(f),
  );
  const version = v ?? "";
  const u = text(unsettled) || "0";
  if (ps === undefined || pe === undefined) return { cycle: undefined, version, unsettled: u };
  return {
    version,
    unsettled: u,
    cycle: {
      periodStart: Number(ps),
      periodEnd: Number(pe),
      units: BigInt(units ?? "0"),
      overage: BigInt(overage ?? "0"),
      pending: BigInt(pending ?? "0"),
      leased: BigInt(leased ?? "0"),
      epoch: Number(epoch ?? "1"),
    },
  };
}

const cycleArgs = (c: SharedCycle) => [
  String(c.periodStart),
  String(c.periodEnd),
  c.units.toString(),
  c.overage.toString(),
  c.pending.toString(),
  c.leased.toString(),
  String(c.epoch),
];

/**
 * Opens the ledger `name` in Redis.
 *
 * @example
 * const shared = await createRedisUsageLedger({ url: env.REDIS_URL, name: "search-api" });
 * const gate = paymentGate({ …, usageLedger: createLeasedUsageLedger({ shared, clock: systemClock }) });
 */
export async function createRedisUsageLedger(
  options: RedisUsageLedgerOptions,
): Promise<SharedUsageLedger & { close(): Promise<void> }> {
  const name = options.name ?? "default";
  if (name.length === 0 || name.length > 128 || /[{}]/.test(name)) {
    throw new TollgateError("InvalidRequest", "usage ledger name must be 1..128 characters without braces");
  }
  const clock = options.clock ?? systemClock;
  let client: RedisUsageClient;
  let owned: { close(): Promise<void> } | undefined;
  if ("url" in options) {
    const created = createClient({ url: options.url });
    created.on("error", (error: unknown) => options.logger?.warn({ err: error }, "Redis usage ledger error"));
    await created.connect();
    client = created as unknown as RedisUsageClient;
    owned = created;
  } else {
    client = options.client;
  }
  const p = `${options.prefix ?? "tollgate:usage:"}{${name}}:`;
  const ledgerKey = `${p}L`;
  const pendingKey = `${p}pend`;
  const leasesKey = `${p}leases`;
  const claimedKey = `${p}claimed`;
  const sentKey = `${p}sent`;
  const cycleKey = (id: bigint | string) => `${p}c:${id}`;

  const run = async (script: string, keys: string[], args: string[]): Promise<unknown> => {
    try {
      return await client.evalSha(sha1(script), { keys, arguments: args });
    } catch (error) {
      if (!String((error as Error)?.message ?? "").includes("NOSCRIPT")) throw error;
      return await client.eval(script, { keys, arguments: args });
    }
  };

  await run(
    "redis.call('HSETNX', KEYS[1], 'id', ARGV[1]); redis.call('HSETNX', KEYS[1], 'u', '0'); return redis.call('HGET', KEYS[1], 'id')",
    [ledgerKey],
    [randomBytes(16).toString("hex")],
  );
  const ledgerId = text(await run("return redis.call('HGET', KEYS[1], 'id')", [ledgerKey], []));

  const snapshot = async (subscriptionId: bigint): Promise<Snapshot> => {
    const [fields, unsettled] = (await run(SNAPSHOT_LUA, [cycleKey(subscriptionId), ledgerKey], [])) as [
      unknown[],
      unknown,
    ];
    return snapshotOf(fields, unsettled);
  };
  const bounded = (request: UsageRequest): UsageRequest =>
    request.maxUnsettled > MAX_UNSETTLED ? { ...request, maxUnsettled: MAX_UNSETTLED } : request;
  const commit = async (
    subscriptionId: bigint,
    seen: Snapshot,
    cycle: SharedCycle,
    unsettled: bigint,
    lease?: {
      ttlMs: number;
      units: bigint;
      spent: bigint;
      base: bigint;
      inc: bigint;
      price: bigint;
      worst: bigint;
    },
  ): Promise<string | boolean> => {
    const args = [
      seen.version,
      seen.unsettled,
      subscriptionId.toString(),
      ...cycleArgs(cycle),
      unsettled.toString(),
    ];
    if (lease !== undefined) {
      args.push(
        String(Math.ceil(lease.ttlMs)),
        lease.units.toString(),
        lease.spent.toString(),
        lease.base.toString(),
        lease.inc.toString(),
        lease.price.toString(),
        lease.worst.toString(),
      );
    }
    const reply = (await run(
      COMMIT_LUA,
      [cycleKey(subscriptionId), ledgerKey, pendingKey, `${p}l:`, leasesKey],
      args,
    )) as unknown[];
    if (Number(reply[0]) !== 1) return false;
    return reply[1] === undefined ? true : text(reply[1]);
  };
  const contended = () =>
    new TollgateError("Internal", "the Redis usage ledger stayed contended; the use was not counted");

  /** Ends one lease with a compare-and-set; false when it is not active (or not yet expired). */
  const endOne = async (leaseId: string, state: "returned" | "reclaimed"): Promise<boolean> => {
    for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
      const reply = (await run(READ_LEASE_LUA, [`${p}l:${leaseId}`], [`${p}c:`, ledgerKey])) as unknown[];
      if (reply.length === 0) return false;
      const [l, fields, u] = reply as [unknown[], unknown[], unknown];
      const [, sub, epoch, units, spent, base, inc, price, worst] = l.map(text);
      const seen = snapshotOf(fields, u);
      const ended = endLease(
        seen.cycle,
        BigInt(seen.unsettled),
        {
          epoch: Number(epoch),
          units: BigInt(units ?? "0"),
          base: BigInt(base ?? "0"),
          includedUnits: BigInt(inc ?? "0"),
          unitPrice: BigInt(price ?? "0"),
          worst: BigInt(worst ?? "0"),
        },
        BigInt(spent ?? "0"),
      );
      const c = ended.cycle;
      const result = Number(
        await run(
          END_LUA,
          [cycleKey(sub ?? ""), ledgerKey, pendingKey, `${p}l:${leaseId}`, leasesKey],
          [
            seen.version,
            seen.unsettled,
            spent ?? "0",
            state === "reclaimed" ? "1" : "0",
            state,
            sub ?? "",
            leaseId,
            ended.unsettled.toString(),
            c === undefined ? "0" : "1",
            ...(c === undefined ? [] : cycleArgs(c)),
          ],
        ),
      );
      if (result === 1) return true;
      if (result === 2 || result === 3) return false;
    }
    throw contended();
  };

  return {
    async reserve(raw) {
      const request = bounded(raw);
      for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
        const seen = await snapshot(request.subscriptionId);
        const result = applyDirectUsage(seen.cycle, BigInt(seen.unsettled), request);
        if (result.cycle === undefined) return result.reservation;
        if (await commit(request.subscriptionId, seen, result.cycle, result.unsettled))
          return result.reservation;
      }
      throw contended();
    },

    async acquire(raw, want, ttlMs) {
      const request = bounded(raw);
      for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
        const seen = await snapshot(request.subscriptionId);
        const unsettled = BigInt(seen.unsettled);
        const granted = grantSize(seen.cycle, unsettled, request, BigInt(want));
        if (granted === undefined) {
          const direct = applyDirectUsage(seen.cycle, unsettled, request);
          if (direct.cycle === undefined) return { lease: undefined, reservation: direct.reservation };
          if (await commit(request.subscriptionId, seen, direct.cycle, direct.unsettled)) {
            return { lease: undefined, reservation: direct.reservation };
          }
          continue;
        }
        const { cycle, grant } = granted;
        const units = BigInt(request.units);
        const id = await commit(request.subscriptionId, seen, cycle, unsettled + grant.worst, {
          ttlMs,
          units: grant.units,
          spent: units,
          base: grant.base,
          inc: grant.includedUnits,
          price: grant.unitPrice,
          worst: grant.worst,
        });
        if (typeof id !== "string") continue;
        const lease: StoredLease = {
          ...grant,
          id,
          subscriptionId: request.subscriptionId,
          epoch: cycle.epoch,
          spent: units,
        };
        return { lease, reservation: firstUseOf(grant, units) };
      }
      throw contended();
    },

    async spend(spends) {
      if (spends.length === 0) return new Set();
      const args = [`${p}l:`];
      for (const s of spends) args.push(s.leaseId, s.units.toString());
      const taken = (await run(SPEND_LUA, [leasesKey], args)) as unknown[];
      return new Set(taken.map(text));
    },

    async release(leaseId) {
      await endOne(leaseId, "returned");
    },

    async reclaimExpired(limit) {
      const expired = (await run(EXPIRED_LUA, [leasesKey], [String(limit)])) as unknown[];
      let reclaimed = 0;
      for (const id of expired) if (await endOne(text(id), "reclaimed")) reclaimed++;
      return reclaimed;
    },

    async claimBatch({ maxItems, staleMs }) {
      const now = clock.now();
      const reply = (await run(
        CLAIM_LUA,
        [ledgerKey, claimedKey, pendingKey],
        [String(now), String(now - staleMs), String(maxItems), `${p}b:`, `${p}c:`],
      )) as unknown[];
      if (reply.length === 0) return undefined;
      const id = text(reply[0]);
      const items: UsageBatchItem[] = text(reply[1])
        .split(",")
        .filter((entry) => entry.length > 0)
        .map((entry) => {
          const [sub, amount] = entry.split(":");
          const subscriptionId = BigInt(sub ?? "0");
          return {
            ref: usageRef(ledgerId, id, subscriptionId),
            subscriptionId,
            amount: BigInt(amount ?? "0"),
          };
        });
      await run(
        ITEMS_LUA,
        [],
        [`${p}i:`, id, ...items.flatMap((i) => [i.ref, i.subscriptionId.toString(), i.amount.toString()])],
      );
      return { id, items };
    },

    async markBatchSent(batchId) {
      const items = text(await run("return redis.call('HGET', KEYS[1], 'items')", [`${p}b:${batchId}`], []));
      const refs = items
        .split(",")
        .filter((entry) => entry.length > 0)
        .map((entry) => usageRef(ledgerId, batchId, BigInt(entry.split(":")[0] ?? "0")));
      await run(
        MARK_LUA,
        [`${p}b:${batchId}`, claimedKey, sentKey],
        [batchId, String(clock.now()), `${p}i:`, ...refs],
      );
    },

    async resolve(outcomes) {
      if (outcomes.length === 0) return 0;
      return Number(
        await run(
          RESOLVE_LUA,
          [ledgerKey, sentKey],
          [`${p}i:`, ...outcomes.flatMap((o) => [o.ref, o.outcome])],
        ),
      );
    },

    async unsettled() {
      return BigInt(text(await run("return redis.call('HGET', KEYS[1], 'u') or '0'", [ledgerKey], [])));
    },

    async unresolved({ olderThanMs, limit }) {
      const rows = (await run(
        UNRESOLVED_LUA,
        [sentKey],
        [String(clock.now() - olderThanMs), String(limit), `${p}i:`],
      )) as unknown[][];
      return rows.map(([ref, sub, amount]) => ({
        ref: text(ref),
        subscriptionId: BigInt(text(sub) || "0"),
        amount: BigInt(text(amount) || "0"),
      }));
    },

    async cycle(subscriptionId): Promise<UsageCycle | undefined> {
      const seen = await snapshot(subscriptionId);
      if (seen.cycle === undefined) return undefined;
      const { leased: _l, epoch: _e, ...cycle } = seen.cycle;
      return cycle;
    },

    async close() {
      await owned?.close();
    },
  };
}
