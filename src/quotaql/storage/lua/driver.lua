-- ARGV: mode (acquire | peek | refund), cost or amount (or one per quota, space-separated),
-- now in ms ('' reads the server's TIME),
-- then the quotas in one argument, space-separated (fewer arguments: each one costs the
-- client an encoding step): "<algorithm> <parameter 1> <parameter 2> <key> <field>" per
-- quota, where <key> is the index in KEYS of the hash that holds its state in <field>, or for
-- a sliding log (<field> '-') the index of the first of its two keys,
-- then (refund) the time of the debit it gives back, ms in the server's clock ('': now).
-- KEYS: the hashes (a tenant's, a user's) and the sliding logs' keys the quotas name.
-- Returns: now, then per quota: allowed (1/0), exceeds capacity (1/0), remaining (text: Redis
-- truncates Lua numbers to integers), retry after ms, reset after ms (acquire and peek).
--
-- A hash's field '~x' is the hash's expiry (ms, in the script's clock): the script extends
-- the key's TTL only when a state needs more time than that, by a quarter more (at least a
-- second), so that most decisions write no expiry at all.

local mode = ARGV[1]
local now
if ARGV[3] == '' then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
else
  now = tonumber(ARGV[3])
end
local at = tonumber(ARGV[5] or '')

local amounts = {}
for each in string.gmatch(ARGV[2], '%S+') do amounts[#amounts + 1] = tonumber(each) end

-- The quotas, and the fields each hash is read for ('~x' first).
local algorithms, firsts, seconds, places, fields = {}, {}, {}, {}, {}
local reads, hashes = {}, {}
local n = 0
for algorithm, first, second, place, field in
    string.gmatch(ARGV[4], '(%S+) (%S+) (%S+) (%S+) (%S+)') do
  if checks[algorithm] == nil then
    return redis.error_reply('quotaql: unknown algorithm ' .. tostring(algorithm))
  end
  n = n + 1
  algorithms[n], firsts[n], seconds[n] = algorithm, tonumber(first), tonumber(second)
  place = tonumber(place)
  places[n], fields[n] = place, field
  if not logs[algorithm] then
    local read = reads[place]
    if read == nil then
      read = {'~x'}
      reads[place] = read
      hashes[#hashes + 1] = place
    end
    read[#read + 1] = field
  end
end

-- One read per hash; states[i] is quota i's state text (false: none).
local states, expiry = {}, {}
for _, place in ipairs(hashes) do
  local values = redis.call('HMGET', KEYS[place], unpack(reads[place]))
  expiry[place] = tonumber(values[1]) or 0
  reads[place] = values
end
do
  local seen = {}
  for i = 1, n do
    local place = places[i]
    if not logs[algorithms[i]] then
      local index = (seen[place] or 1) + 1
      seen[place] = index
      states[i] = reads[place][index]
    end
  end
end

-- Write the changed states of each hash (HDEL the empty ones), extending its TTL if needed.
local function store(changed, needs)
  for place, change in pairs(changed) do
    if #change.set > 0 then
      local need = needs[place] or 0
      if need > expiry[place] then
        local expires = need + math.max(1000, math.ceil((need - now) / 4))
        change.set[#change.set + 1] = '~x'
        change.set[#change.set + 1] = expires
        redis.call('HSET', KEYS[place], unpack(change.set))
        redis.call('PEXPIRE', KEYS[place], expires - now)
      else
        redis.call('HSET', KEYS[place], unpack(change.set))
      end
    end
    if #change.del > 0 then redis.call('HDEL', KEYS[place], unpack(change.del)) end
  end
end

local function change_of(changed, place)
  local change = changed[place]
  if change == nil then
    change = {set = {}, del = {}}
    changed[place] = change
  end
  return change
end

if mode == 'refund' then
  local changed = {}
  for i = 1, n do
    local amount = amounts[i] or amounts[1]
    local algorithm, place = algorithms[i], places[i]
    -- Nothing back (a root field's quota): its state is left as it is, as in memory.
    if amount > 0 then
      if logs[algorithm] then
        refunds[algorithm]({KEYS[place], KEYS[place + 1]}, now, amount, firsts[i], seconds[i], at)
      elseif states[i] then  -- no state: a full quota, nothing to give back
        local state, ttl = refunds[algorithm](states[i], now, amount, firsts[i], seconds[i], at)
        local change = change_of(changed, place)
        if state ~= nil and ttl > 0 then
          change.set[#change.set + 1] = fields[i]
          change.set[#change.set + 1] = state
        else
          change.del[#change.del + 1] = fields[i]
        end
      end
    end
  end
  store(changed, {})  -- a refund never needs more time than the hash has
  return {now}
end

local results = {now}
local allowed = true
local news, ttls = {}, {}
for i = 1, n do
  local algorithm, place = algorithms[i], places[i]
  local amount = amounts[i] or amounts[1]
  local ok, exceeds, remaining, retry, reset, new, ttl
  if logs[algorithm] then
    ok, exceeds, remaining, retry, reset, new, ttl =
      checks[algorithm]({KEYS[place], KEYS[place + 1]}, now, amount, firsts[i], seconds[i])
  else
    ok, exceeds, remaining, retry, reset, new, ttl =
      checks[algorithm](states[i], now, amount, firsts[i], seconds[i])
  end
  if not ok then allowed = false end
  news[i], ttls[i] = new, ttl
  local k = #results
  results[k + 1] = ok and 1 or 0
  results[k + 2] = exceeds and 1 or 0
  -- '%.17g' reads back to the same double.
  results[k + 3] = string.format('%.17g', remaining)
  results[k + 4] = retry
  results[k + 5] = reset
end

-- All or nothing: write only when every quota allowed.
if mode == 'acquire' and allowed then
  local changed, needs = {}, {}
  for i = 1, n do
    local new, place = news[i], places[i]
    if new ~= nil then
      if logs[algorithms[i]] then
        new()
      elseif ttls[i] > 0 then
        local change = change_of(changed, place)
        change.set[#change.set + 1] = fields[i]
        change.set[#change.set + 1] = new
        local need = now + ttls[i]
        if need > (needs[place] or 0) then needs[place] = need end
      elseif states[i] then  -- back to the empty state: nothing to keep
        local change = change_of(changed, place)
        change.del[#change.del + 1] = fields[i]
      end
    end
  end
  store(changed, needs)
end
return results
