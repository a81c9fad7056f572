-- ARGV: mode (acquire | peek | refund | charge), cost or amount (or one per quota, space-separated),
-- now in ms ('' reads the server's TIME),
-- then the quotas in one argument, space-separated (fewer arguments: each one costs the
-- client an encoding step): "<algorithm> <parameter 1> <parameter 2> <delay> <key> <field>"
-- per quota, where <delay> is the longest a reservation may wait (ms, buckets; 0: none), or
-- "<ms>:<max waiting>:<key>" with the index in KEYS of the set of its waiting requests,
-- <key> the index in KEYS of the hash that holds its state in <field>, or for a sliding log
-- (<field> '-') the index of the first of its two keys,
-- then (refund) the time of the debit it gives back, ms in the server's clock ('': now), and
-- the turn that debit reserved, ms ('' or absent: none): the refund of a waiter's debit takes
-- one entry of that turn out of each set of waiting requests the quotas name (a waiter that
-- left counts no more; after its turn the entry is gone already).
-- KEYS: the hashes (a tenant's, a user's) and the sliding logs' keys the quotas name.
-- Returns: now, then per quota: allowed (1/0), exceeds capacity (1/0), remaining (text: Redis
-- truncates Lua numbers to integers), retry after ms (allowed: a reservation's wait), reset
-- after ms (acquire and peek).
--
-- A hash's field '~x' is the hash's expiry (ms, in the script's clock): the script extends
-- the key's TTL only when a state needs more time than that, by a quarter more (at least a
-- second), so that most decisions write no expiry at all.

local mode = ARGV[1]
local now = clock(ARGV[3])

-- One amount for all quotas, or one each (root-field quotas pay their field's cost).
local amount = tonumber(ARGV[2])
local amounts
if amount == nil then
  amounts = {}
  for each in string.gmatch(ARGV[2], '%S+') do amounts[#amounts + 1] = tonumber(each) end
end

-- The quotas, 12 slots each in one array: algorithm, parameters, key index, field, the
-- position of its state in its hash's read, after the checks its new state (a sliding
-- log's: a function that writes it) and that state's TTL, its delay, the most requests that
-- may wait and the key index of their set (0: no bound), and after the checks its wait.
-- Made with room for three quotas at once (the constructor sizes the array; its slots stay
-- nil, as unset slots must): grown slot by slot, the array would be reallocated five times
-- for one quota and six for three. Per hash, the fields to read ('~x', its expiry, first),
-- and in `places` each hash once: its key index and what its states need (the latest time
-- one of them still matters, ms).
local q = {
  nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
  nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
  nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
}
local reads = {}
local places = {nil, nil, nil, nil}  -- room for two hashes
local n = 0
for algorithm, first, second, delay, place, field in
    string.gmatch(ARGV[4], '(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)') do
  if checks[algorithm] == nil then
    return redis.error_reply('quotaql: unknown algorithm ' .. tostring(algorithm))
  end
  place = tonumber(place)
  local slot = 0
  if field ~= '-' then
    local read = reads[place]
    if read == nil then
      read = {'~x', nil, nil, nil}  -- room for three fields
      reads[place] = read
      places[#places + 1] = place
      places[#places + 1] = 0
    end
    slot = #read + 1
    read[slot] = field
  end
  local wait_max, most, queue = tonumber(delay), 0, 0
  if wait_max == nil then
    local ms_, most_, queue_ = string.match(delay, '^(%d+):(%d+):(%d+)$')
    wait_max, most, queue = tonumber(ms_), tonumber(most_), tonumber(queue_)
  end
  q[n + 1], q[n + 2], q[n + 3], q[n + 4], q[n + 5], q[n + 6] =
    algorithm, tonumber(first), tonumber(second), place, field, slot
  q[n + 9], q[n + 10], q[n + 11], q[n + 12] = wait_max, most, queue, 0
  n = n + 12
end

-- One read per hash: reads[place] becomes what it read, [slot] a state's text (false: none),
-- [1] the hash's expiry.
for j = 1, #places, 2 do
  local place = places[j]
  reads[place] = redis.call('HMGET', KEYS[place], unpack(reads[place]))
end

-- Write each hash's changed states (mode: 'acquire' or 'refund'), deleting the empty ones and
-- extending its TTL when a state needs more than it has.
local function store()
  for j = 1, #places, 2 do
    local place, need = places[j], places[j + 1]
    local set, del
    for i = 1, n, 12 do
      if q[i + 3] == place and q[i + 5] > 0 then
        local new, ttl = q[i + 6], q[i + 7]
        if new ~= nil and ttl > 0 then
          if set == nil then set = {q[i + 4], new, nil, nil} else
            set[#set + 1] = q[i + 4]
            set[#set + 1] = new
          end
        elseif ttl ~= nil and reads[place][q[i + 5]] then  -- empty again: nothing to keep
          if del == nil then del = {q[i + 4]} else del[#del + 1] = q[i + 4] end
        end
      end
    end
    if set ~= nil then
      if need > (tonumber(reads[place][1]) or 0) then
        local expires = need + math.max(1000, math.ceil((need - now) / 4))
        set[#set + 1] = '~x'
        set[#set + 1] = expires
        redis.call('HSET', KEYS[place], unpack(set))
        redis.call('PEXPIRE', KEYS[place], expires - now)
      else
        redis.call('HSET', KEYS[place], unpack(set))
      end
    end
    if del ~= nil then redis.call('HDEL', KEYS[place], unpack(del)) end
  end
end

if mode == 'charge' then  -- a debit whether it fits or not
  for i = 1, n, 12 do
    local algorithm, place = q[i], q[i + 3]
    local given = amount or amounts[(i + 11) / 12]
    if given > 0 then
      if logs[algorithm] then
        charges[algorithm]({KEYS[place], KEYS[place + 1]}, now, given, q[i + 1], q[i + 2])
      else
        local new, ttl = charges[algorithm](reads[place][q[i + 5]], now, given, q[i + 1], q[i + 2])
        q[i + 6], q[i + 7] = new, ttl
        if new ~= nil and ttl > 0 then
          local need = now + ttl
          for j = 1, #places, 2 do
            if places[j] == place and need > places[j + 1] then places[j + 1] = need end
          end
        end
      end
    end
  end
  store()
  return {now}
end

if mode == 'refund' then
  local at = tonumber(ARGV[5] or '')
  local turn = tonumber(ARGV[6] or '')
  if turn ~= nil and not (turn > now) then turn = nil end  -- its turn came: it left the sets
  for i = 1, n, 12 do
    local algorithm, place = q[i], q[i + 3]
    local given = amount or amounts[(i + 11) / 12]
    -- Nothing back (a root field's quota): its state is left as it is, as in memory.
    if given > 0 then
      if turn ~= nil and q[i + 9] > 0 then  -- one waiter of that turn leaves this set
        local waiting = KEYS[q[i + 10]]
        local entry = redis.call('ZRANGEBYSCORE', waiting, turn, turn, 'LIMIT', 0, 1)[1]
        if entry then redis.call('ZREM', waiting, entry) end
      end
      if logs[algorithm] then
        refunds[algorithm]({KEYS[place], KEYS[place + 1]}, now, given, q[i + 1], q[i + 2], at)
      else
        local state = reads[place][q[i + 5]]
        if state then  -- no state: a full quota, nothing to give back
          q[i + 6], q[i + 7] = refunds[algorithm](state, now, given, q[i + 1], q[i + 2], at)
        end
      end
    end
  end
  store()  -- a refund never needs more time than the hash has: `places` needs stay 0
  return {now}
end

-- Sized for three quotas, as `q` (a table grown by one array slot at a time is reallocated
-- at each power of two).
local results = {
  now, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
}
local allowed = true
for i = 1, n, 12 do
  local algorithm, place = q[i], q[i + 3]
  local cost = amount or amounts[(i + 11) / 12]
  local ok, exceeds, remaining, retry, reset, new, ttl
  if logs[algorithm] then
    ok, exceeds, remaining, retry, reset, new, ttl =
      checks[algorithm]({KEYS[place], KEYS[place + 1]}, now, cost, q[i + 1], q[i + 2])
  else
    ok, exceeds, remaining, retry, reset, new, ttl =
      checks[algorithm](reads[place][q[i + 5]], now, cost, q[i + 1], q[i + 2], q[i + 8])
  end
  if ok and retry > 0 and q[i + 9] > 0 then  -- a reservation, and at most so many may wait
    local waiting = KEYS[q[i + 10]]
    redis.call('ZREMRANGEBYSCORE', waiting, '-inf', now)
    if redis.call('ZCARD', waiting) >= q[i + 9] then  -- refused until the first one runs
      local first = redis.call('ZRANGE', waiting, 0, 0, 'WITHSCORES')
      ok, new = false, nil
      retry = math.max(1, tonumber(first[2]) - now)
    else
      q[i + 11] = retry
    end
  end
  if not ok then allowed = false end
  q[i + 6], q[i + 7] = new, ttl
  local k = #results
  -- '%.17g' reads back to the same double.
  results[k + 1], results[k + 2], results[k + 3], results[k + 4], results[k + 5] =
    ok and 1 or 0, exceeds and 1 or 0, string.format('%.17g', remaining), retry, reset
end

-- All or nothing: write only when every quota allowed.
if mode == 'acquire' and allowed then
  -- The request runs after its longest reservation: it waits in every set till then, and
  -- a refund of its debit names that turn (Decision.at + Decision.delay).
  local wait = 0
  for j = 5, #results, 5 do
    if results[j] > wait then wait = results[j] end
  end
  for i = 1, n, 12 do
    local new = q[i + 6]
    if new ~= nil then
      if q[i + 11] > 0 then  -- it waits its turn: in the set of waiting requests till then
        local waiting = KEYS[q[i + 10]]
        -- Named by its state, made unique: after a refund moved the bucket back, a
        -- reservation may reach the state of one still waiting (fewer than the most that
        -- may wait are in the set, so a free name is found within that many tries).
        local member, k = new, 0
        while redis.call('ZSCORE', waiting, member) do
          k = k + 1
          member = new .. '/' .. k
        end
        redis.call('ZADD', waiting, now + wait, member)
        -- The set lives until its last waiter's turn (and a second more), not this one's:
        -- after a refund a reservation may wait less than one already in the set.
        if redis.call('PTTL', waiting) < wait + 1000 then
          redis.call('PEXPIRE', waiting, wait + 1000)
        end
      end
      if logs[q[i]] then
        new()
      elseif q[i + 7] > 0 then
        local need = now + q[i + 7]
        for j = 1, #places, 2 do
          if places[j] == q[i + 3] and need > places[j + 1] then places[j + 1] = need end
        end
      end
    end
  end
  store()
end
return results
