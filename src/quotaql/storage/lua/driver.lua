-- ARGV: mode (acquire | peek | refund), cost or amount (or one per quota, space-separated),
-- now in ms ('' reads the server's TIME),
-- then the quotas in one argument: "<algorithm> <parameter 1> <parameter 2>" per quota,
-- space-separated (fewer arguments: each one costs the client an encoding step),
-- then (refund) the time of the debit it gives back, ms in the server's clock ('': now).
-- KEYS: per quota its state key (sliding_log: the ZSET and its meta key), in quota order.
-- Returns: now, then per quota: allowed (1/0), exceeds capacity (1/0), remaining (text: Redis
-- truncates Lua numbers to integers), retry after ms, reset after ms (acquire and peek).

local mode = ARGV[1]
local amount = tonumber(ARGV[2])
local now
if ARGV[3] == '' then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
else
  now = tonumber(ARGV[3])
end

local at = tonumber(ARGV[5] or '')

local function unknown(algorithm)
  return redis.error_reply('quotaql: unknown algorithm ' .. tostring(algorithm))
end

-- One quota, the common case: all or nothing is just this quota's answer.
local algorithm, first, second = string.match(ARGV[4], '^(%S+) (%S+) (%S+)$')
if algorithm ~= nil then
  if checks[algorithm] == nil then return unknown(algorithm) end
  if mode == 'refund' then
    refunds[algorithm](KEYS, now, amount, tonumber(first), tonumber(second), at)
    return {now}
  end
  local check = checks[algorithm](KEYS, now, amount, tonumber(first), tonumber(second))
  if check[1] and check[6] and mode == 'acquire' then check[6]() end
  -- '%.17g' reads back to the same double.
  return {now, check[1] and 1 or 0, check[2] and 1 or 0, string.format('%.17g', check[3]),
          check[4], check[5]}
end

-- Several quotas: one amount for all, or one each (root-field quotas pay their field's cost).
local amounts = {}
for each in string.gmatch(ARGV[2], '%S+') do amounts[#amounts + 1] = tonumber(each) end
local results = {now}
local commits = {}
local allowed = true
local key_index = 1
local quota_index = 0
for algorithm, first, second in string.gmatch(ARGV[4], '(%S+) (%S+) (%S+)') do
  first, second = tonumber(first), tonumber(second)
  quota_index = quota_index + 1
  amount = amounts[quota_index] or amounts[1]
  if checks[algorithm] == nil then return unknown(algorithm) end
  local keys = {}
  for i = 1, key_counts[algorithm] or 1 do
    keys[i] = KEYS[key_index]
    key_index = key_index + 1
  end
  if mode == 'refund' then
    -- Nothing back (a root field's quota): its state is left as it is, as in memory.
    if amount > 0 then refunds[algorithm](keys, now, amount, first, second, at) end
  else
    local check = checks[algorithm](keys, now, amount, first, second)
    if not check[1] then allowed = false end
    if check[6] then commits[#commits + 1] = check[6] end
    local n = #results
    results[n + 1] = check[1] and 1 or 0
    results[n + 2] = check[2] and 1 or 0
    results[n + 3] = string.format('%.17g', check[3])
    results[n + 4] = check[4]
    results[n + 5] = check[5]
  end
end

-- All or nothing: write only when every quota allowed.
if mode == 'acquire' and allowed then
  for _, write in ipairs(commits) do write() end
end
return results
