"""The Lua scripts behind `quota.leases.LeaseStore`.

Redis runs one script at a time, so everything a script reads and writes is one atomic step:
two gateway processes cannot both see the last free tokens and both take them. Every script
first reclaims expired leases (and expired waiter marks of its pool), so a gateway that died
holding leases leaks nothing past their TTL, with no sweeper process to run.

Keys (prefix `sy:` by default; P below):

    P lease:expiry              zset  lease_id -> expires_at (renewed while the request runs)
    P lease:info                hash  lease_id -> {"p": pool, "t": team, "n": tokens, "b": kind}
    P team_inflight             hash  team -> tokens leased across every pool (max_inflight_tokens)
    P pool:{pool}:owned         hash  team -> tokens leased within share
    P pool:{pool}:borrowed      hash  team -> tokens leased beyond share
    P pool:{pool}:preemptible   hash  team -> tokens leased by bulk, which the engine preempts for
                                      every other class
    P pool:{pool}:flex          hash  team -> tokens leased by flex, which the engine preempts for
                                      priority and interactive work
    P pool:{pool}:priority      hash  team -> tokens leased within share by priority requests
    P pool:{pool}:ends:{team}   zset  lease_id -> expected end (Retry-After from own leases)
    P pool:{pool}:waiters       zset  waiter_id -> deadline (an interactive request queued)
    P pool:{pool}:waiter_team   hash  waiter_id -> team
    P pool:{pool}:waiting       hash  team -> waiters

A lease's kind (`b`): 0 owned (interactive within share), 1 borrowed (priority or interactive
beyond share, run at bulk priority), 2 preemptible (bulk, within share or borrowing beyond it),
3 priority (priority within share), 4 flex (within share or borrowing beyond it). What counts
against a team's share depends on the request's class (`TeamLoad.counted`): priority counts the
team's priority leases only; interactive leaves out its flex and bulk, flex its bulk (the engine
preempts those for it); bulk counts everything. Priority and interactive requests take room from
borrowed, flex and bulk leases alike.

Reclaiming touches the keys of whatever pool an expired lease belonged to, so the scripts name
their keys themselves rather than through KEYS: right for one Redis (replicated), not for
Redis Cluster. Numbers cross into Lua as decimal strings; the weights arrive sorted by team
and are summed in that order, as `SharePolicy.share_weight` does, so both compare the same
doubles.
"""

from __future__ import annotations

RECLAIM_BATCH = 1000  # expired leases dropped per script call; the rest go on the next one
LEASE_ENDS_RETURNED = 100  # of the team's leases, for the Retry-After walk

_PRELUDE = f"""
local P = ARGV[1]
local function pool_key(pool, what) return P .. 'pool:' .. pool .. ':' .. what end

local function add(key, field, delta)
  if redis.call('HINCRBY', key, field, delta) <= 0 then redis.call('HDEL', key, field) end
end

local KINDS = {{[0] = 'owned', [1] = 'borrowed', [2] = 'preemptible', [3] = 'priority', [4] = 'flex'}}

local function record_lease(id, pool, team, tokens, kind, expires_at, ends_at)
  redis.call('HSET', P .. 'lease:info', id, cjson.encode({{p = pool, t = team, n = tokens, b = kind}}))
  redis.call('ZADD', P .. 'lease:expiry', expires_at, id)
  redis.call('ZADD', pool_key(pool, 'ends:' .. team), ends_at, id)
  add(pool_key(pool, KINDS[kind]), team, tokens)
  add(P .. 'team_inflight', team, tokens)
end

local function drop_lease(id)
  local raw = redis.call('HGET', P .. 'lease:info', id)
  if not raw then return false end
  local info = cjson.decode(raw)
  add(pool_key(info.p, KINDS[info.b]), info.t, -info.n)
  add(P .. 'team_inflight', info.t, -info.n)
  redis.call('ZREM', pool_key(info.p, 'ends:' .. info.t), id)
  redis.call('ZREM', P .. 'lease:expiry', id)
  redis.call('HDEL', P .. 'lease:info', id)
  return true
end

local function drop_waiter(pool, id)
  local team = redis.call('HGET', pool_key(pool, 'waiter_team'), id)
  if not team then return end
  redis.call('HDEL', pool_key(pool, 'waiter_team'), id)
  redis.call('ZREM', pool_key(pool, 'waiters'), id)
  add(pool_key(pool, 'waiting'), team, -1)
end

local function expired(key, now)
  return redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, {RECLAIM_BATCH})
end

local function reclaim(now, pool)
  for _, id in ipairs(expired(P .. 'lease:expiry', now)) do drop_lease(id) end
  for _, id in ipairs(expired(pool_key(pool, 'waiters'), now)) do drop_waiter(pool, id) end
end

local function numbers(key)
  local flat, out = redis.call('HGETALL', key), {{}}
  for i = 1, #flat, 2 do out[flat[i]] = tonumber(flat[i + 1]) end
  return out
end

-- {{team: [owned, borrowed, waiters, preemptible, priority, flex]}} and the soonest expected end of any
-- lease in the pool.
local function pool_state(pool)
  local owned, borrowed, waiting = numbers(pool_key(pool, 'owned')), numbers(pool_key(pool, 'borrowed')),
    numbers(pool_key(pool, 'waiting'))
  local preemptible, priority = numbers(pool_key(pool, 'preemptible')), numbers(pool_key(pool, 'priority'))
  local flex = numbers(pool_key(pool, 'flex'))
  local loads, next_end = {{}}, nil
  local function load(team)
    if not loads[team] then
      loads[team] = {{owned[team] or 0, borrowed[team] or 0, waiting[team] or 0, preemptible[team] or 0,
        priority[team] or 0, flex[team] or 0}}
      local first = redis.call('ZRANGE', pool_key(pool, 'ends:' .. team), 0, 0, 'WITHSCORES')
      if first[2] and (not next_end or tonumber(first[2]) < next_end) then next_end = tonumber(first[2]) end
    end
  end
  for team in pairs(owned) do load(team) end
  for team in pairs(borrowed) do load(team) end
  for team in pairs(preemptible) do load(team) end
  for team in pairs(priority) do load(team) end
  for team in pairs(flex) do load(team) end
  for team in pairs(waiting) do load(team) end
  return loads, next_end
end
"""

# ARGV: prefix, now, pool, team, tokens, lease_id, expires_at, ends_at, capacity, class (0: bulk,
# 1: interactive, 2: priority, 3: flex),
# max_inflight ('' = none), tokens_per_day ('' = none), usage day key, waiter_id ('' = none),
# waiter deadline, then (team, weight) pairs sorted by team.
RESERVE = (
    _PRELUDE
    + f"""
local now, pool, team, tokens = tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local lease_id, expires_at, ends_at = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local capacity, class = tonumber(ARGV[9]), ARGV[10]
local interactive, priority, flex = class == '1' or class == '2', class == '2', class == '3'
local inflight_limit, day_limit = tonumber(ARGV[11]), tonumber(ARGV[12])
local waiter_id, waiter_deadline = ARGV[14], tonumber(ARGV[15])

reclaim(now, pool)
local loads, next_end = pool_state(pool)
local inflight = tonumber(redis.call('HGET', P .. 'team_inflight', team) or '0')
local today = tonumber(redis.call('GET', ARGV[13]) or '0')

-- The same steps as SharePolicy.decide, in the same order.
local weight, total, total_all = 0.0, 0.0, 0.0
for i = 16, #ARGV, 2 do
  local t, w = ARGV[i], tonumber(ARGV[i + 1])
  local l = loads[t]
  if t == team then weight = w end
  if t == team or (l and (l[1] + l[2] + l[4] + l[5] + l[6] > 0 or l[3] > 0)) then total = total + w end
  total_all = total_all + w
end
local owned, leased, used, any_waiting, others_waiting = 0, 0, 0, false, false
for t, l in pairs(loads) do
  owned = owned + l[1] + l[5]
  leased = leased + l[1] + l[2] + l[4] + l[5] + l[6]
  -- What counts against the share (SharePolicy.decide: `used`).
  if t == team then
    if priority then used = l[5]
    elseif interactive then used = l[1] + l[2] + l[5]
    elseif flex then used = l[1] + l[2] + l[5] + l[6]
    else used = l[1] + l[2] + l[4] + l[5] + l[6] end
  end
  if l[3] > 0 then
    any_waiting = true
    if t ~= team then others_waiting = true end
  end
end

local d
if (day_limit and tokens > day_limit) or (inflight_limit and tokens > inflight_limit) then d = 'too_large'
elseif day_limit and today + inflight + tokens > day_limit then d = 'refuse_limit'
elseif inflight_limit and inflight + tokens > inflight_limit then d = 'refuse_limit'
elseif tokens > capacity then d = 'fleet_full'
elseif not interactive and any_waiting then d = 'fleet_full'
elseif (used + tokens) * total <= capacity * weight then
  local room = capacity - (interactive and owned or leased)
  if tokens > room then d = 'fleet_full'
  -- Beyond the share guaranteed over every configured team, the room belongs to idle teams:
  -- borrowed, so a team that comes back takes it first.
  elseif (used + tokens) * total_all <= capacity * weight then d = 'admit'
  elseif leased + tokens <= capacity then d = 'borrow'
  else d = 'fleet_full' end
elseif not others_waiting and leased + tokens <= capacity then d = 'borrow'
else d = 'refuse_team' end

local ends = {{}}
if d == 'admit' or d == 'borrow' then
  local kind = 0
  if flex then kind = 4 elseif not interactive then kind = 2 elseif d == 'borrow' then kind = 1
  elseif priority then kind = 3 end
  record_lease(lease_id, pool, team, tokens, kind, expires_at, ends_at)
  if waiter_id ~= '' then drop_waiter(pool, waiter_id) end
else
  local flat = redis.call('ZRANGE', pool_key(pool, 'ends:' .. team), 0, {LEASE_ENDS_RETURNED - 1}, 'WITHSCORES')
  for i = 1, #flat, 2 do
    local raw = redis.call('HGET', P .. 'lease:info', flat[i])
    if raw then ends[#ends + 1] = {{tonumber(flat[i + 1]), cjson.decode(raw).n}} end
  end
  -- A queued request marks its team as waiting (so others stop borrowing); any other refusal
  -- ends its wait.
  if waiter_id ~= '' and d == 'fleet_full' then
    if redis.call('ZADD', pool_key(pool, 'waiters'), waiter_deadline, waiter_id) == 1 then
      redis.call('HSET', pool_key(pool, 'waiter_team'), waiter_id, team)
      add(pool_key(pool, 'waiting'), team, 1)
    end
  elseif waiter_id ~= '' then
    drop_waiter(pool, waiter_id)
  end
end
return cjson.encode({{d = d, loads = loads, next_end = next_end, inflight = inflight, today = today, ends = ends}})
"""
)

# ARGV: prefix, now, expires_at, then (lease_id, pool, team, tokens, kind 0..4) per lease:
# one call renews every lease one gateway process holds. A lease reclaimed while its request
# still ran (the gateway stalled past the TTL) is recorded again: the tokens are still held on
# a server, so the accounting must count them. Returns the ids recorded again.
RENEW_MANY = (
    _PRELUDE
    + """
local now, expires_at = tonumber(ARGV[2]), tonumber(ARGV[3])
local reclaimed, restored = {}, {}
for i = 4, #ARGV, 5 do
  local id, pool = ARGV[i], ARGV[i + 1]
  if not reclaimed[pool] then
    reclaim(now, pool)
    reclaimed[pool] = true
  end
  if redis.call('HEXISTS', P .. 'lease:info', id) == 1 then
    redis.call('ZADD', P .. 'lease:expiry', expires_at, id)
  else
    record_lease(id, pool, ARGV[i + 2], tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]), expires_at, expires_at)
    restored[#restored + 1] = id
  end
end
return restored
"""
)

# ARGV: prefix, now, lease_id, pool. Returns 1 if the lease was held, 0 if already gone.
RELEASE = (
    _PRELUDE
    + """
reclaim(tonumber(ARGV[2]), ARGV[4])
return drop_lease(ARGV[3]) and 1 or 0
"""
)

# ARGV: prefix, now, pool, waiter_id. A queued request that gave up (timeout or cancel).
UNWAIT = (
    _PRELUDE
    + """
reclaim(tonumber(ARGV[2]), ARGV[3])
drop_waiter(ARGV[3], ARGV[4])
return 1
"""
)

# ARGV: prefix, now, pool. Returns the pool's loads after reclaiming.
LOADS = (
    _PRELUDE
    + """
reclaim(tonumber(ARGV[2]), ARGV[3])
local loads, next_end = pool_state(ARGV[3])
return cjson.encode({loads = loads, next_end = next_end})
"""
)
