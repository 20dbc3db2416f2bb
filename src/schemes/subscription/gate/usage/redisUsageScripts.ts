/**
 * The Redis usage ledger's Lua scripts. Each runs atomically in Redis: the compare-and-sets that commit
 * a change read from a snapshot, the fenced spends into leases, and the batch, item and outcome
 * bookkeeping (createRedisUsageLedger.ts describes the scheme). Keys and arguments are listed above
 * each script.
 */

const NOW_LUA = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

export const SNAPSHOT_LUA = `
return { redis.call('HMGET', KEYS[1], 'ps', 'pe', 'units', 'overage', 'pending', 'leased', 'epoch', 'v'),
  redis.call('HGET', KEYS[2], 'u') or '0' }`;

// KEYS: cycle, ledger, pending set, lease key prefix, leases zset.
// ARGV: v, u, sub, ps, pe, units, overage, pending, leased, epoch, u', [ttl, units, spent, base, inc, price, worst]
export const COMMIT_LUA = `
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
export const SPEND_LUA = `
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
export const READ_LEASE_LUA = `
local l = redis.call('HMGET', KEYS[1], 'state', 'sub', 'epoch', 'units', 'spent', 'base', 'inc', 'price', 'worst', 'exp')
if l[1] ~= 'active' then return {} end
return { l, redis.call('HMGET', ARGV[1] .. l[2], 'ps', 'pe', 'units', 'overage', 'pending', 'leased', 'epoch', 'v'),
  redis.call('HGET', ARGV[2], 'u') or '0' }`;

// KEYS: cycle, ledger, pending set, lease, leases zset.
// ARGV: v, u, spent, onlyExpired, state, sub, id, u', hasCycle, ps, pe, units, overage, pending, leased, epoch
export const END_LUA = `
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
export const CLAIM_LUA = `
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
export const ITEMS_LUA = `
for i = 3, #ARGV, 3 do
  local k = ARGV[1] .. ARGV[i]
  if redis.call('EXISTS', k) == 0 then
    redis.call('HSET', k, 'sub', ARGV[i + 1], 'amount', ARGV[i + 2], 'st', 'claimed', 'batch', ARGV[2])
  end
end
return 1`;

// KEYS: batch, claimed zset, sent zset. ARGV: batch id, now, item prefix, refs…
export const MARK_LUA = `
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
export const RESOLVE_LUA = `
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
export const UNRESOLVED_LUA = `
local refs = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, ref in ipairs(refs) do
  local item = redis.call('HMGET', ARGV[3] .. ref, 'sub', 'amount')
  out[#out + 1] = { ref, item[1], item[2] }
end
return out`;

// KEYS: leases zset. ARGV: limit.
export const EXPIRED_LUA = `
${NOW_LUA}
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))`;

/** Stores the ledger's id and a zero `unsettled` once, on first open; answers the id. */
export const INIT_LEDGER_LUA =
  "redis.call('HSETNX', KEYS[1], 'id', ARGV[1]); redis.call('HSETNX', KEYS[1], 'u', '0'); return redis.call('HGET', KEYS[1], 'id')";
export const LEDGER_ID_LUA = "return redis.call('HGET', KEYS[1], 'id')";
export const BATCH_ITEMS_LUA = "return redis.call('HGET', KEYS[1], 'items')";
export const UNSETTLED_LUA = "return redis.call('HGET', KEYS[1], 'u') or '0'";
