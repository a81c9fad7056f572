-- quotaql: one script decides every quota of one key, atomically, in one round trip.
-- It is assembled from _common.lua, the files of the algorithms a call uses (so Redis runs
-- no definitions it does not need), and driver.lua, in that order. The algorithm files
-- mirror quotaql/policy/algorithms.py operation for operation; each registers its functions
-- in the tables below.

local checks = {}      -- algorithm -> check(keys, now, cost, param 1, param 2)
local refunds = {}     -- algorithm -> refund(keys, now, amount, param 1, param 2, debit time)
local key_counts = {}  -- algorithm -> keys per quota, when more than one

-- A duration rounded up to whole milliseconds, never negative.
local function ms(value)
  return math.max(0, math.ceil(value))
end

-- A number as text that reads back to the same double (Lua's tostring keeps 14 digits):
-- whole numbers as integers (Redis stores those most compactly), others in the short form
-- when it is exact, else with all 17 digits.
local function num(value)
  if value == math.floor(value) and math.abs(value) < 2^53 then
    return string.format('%d', value)
  end
  local text = string.format('%.15g', value)
  if tonumber(text) ~= value then text = string.format('%.17g', value) end
  return text
end

-- The rounding a fit may absorb, as a share of the quota's size (policy.algorithms.SLACK).
local SLACK = 1e-9

-- Store a state with its time to live; a state that no longer matters is deleted.
local function put(key, value, ttl)
  if ttl > 0 then
    redis.call('SET', key, value, 'PX', ttl)
  else
    redis.call('DEL', key)
  end
end

-- Milliseconds of refill a bucket (token_bucket, gcra) still owes: 0 when full. The state is
-- when it is full again, in microseconds.
local function bucket_debt(key, now_us)
  local full_at = tonumber(redis.call('GET', key) or nil)
  if full_at ~= nil and full_at > now_us then return (full_at - now_us) / 1000 end
  return 0
end
