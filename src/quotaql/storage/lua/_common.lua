-- quotaql: one script decides every quota of one key, atomically, in one round trip.
-- It is assembled from _clock.lua, _common.lua, the files of the algorithms a call uses (so Redis runs
-- no definitions it does not need), and driver.lua, in that order. The algorithm files
-- mirror quotaql/policy/algorithms.py operation for operation; each registers its functions
-- in the tables below.
--
-- The states of a tenant's buckets and windows are fields of one hash (one per user scope),
-- so a decision over several quotas reads and writes each hash once: the algorithms are pure
-- functions of a state's text (false: none), and the driver does the I/O. A sliding log
-- keeps its own two keys (a ZSET of entries and their total) and does its own I/O.

local checks = {}      -- algorithm -> check(state, now, cost, param 1, param 2)
local refunds = {}     -- algorithm -> refund(state, now, amount, param 1, param 2, debit time)
local charges = {}     -- algorithm -> charge(state, now, amount, param 1, param 2): a debit
                       -- made whether it fits or not (another region's admissions)
local logs = {}        -- algorithms that keep their own keys (sliding_log)

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

-- Milliseconds of refill a bucket (token_bucket, gcra) still owes: 0 when full. The state is
-- when it is full again, in microseconds.
local function bucket_debt(state, now_us)
  local full_at = tonumber(state)
  if full_at ~= nil and full_at > now_us then return (full_at - now_us) / 1000 end
  return 0
end

-- A bucket's state and TTL once its debt moves by `change` ms (a refund's is negative; nil:
-- back to full).
local function rebucket(state, now, change)
  local now_us = now * 1000
  local debt = bucket_debt(state, now_us) + change
  if debt <= 0 then return nil, 0 end
  return num(now_us + math.ceil(debt * 1000)), ms(debt)
end
