-- Fixed window: mirrors quotaql.policy.algorithms.fixed_window / fixed_window_refund.
-- State (text): "<window start ms> <count>". Params: limit, window (ms).
-- Returns as token_bucket.lua's.

-- The window as of now and its count (a later window's state stays as it is).
local function fixed_window_count(state, now, window)
  local start = now - now % window
  if not state then return start, 0 end
  local old_start, count = string.match(state, '^(%S+) (%S+)$')
  old_start = tonumber(old_start)
  if old_start >= start then return old_start, tonumber(count) end
  return start, 0
end

-- The state to store for this count and its TTL (nil when the count is 0).
local function fixed_window_stored(start, count, now, window)
  if count == 0 then return nil, 0 end
  return num(start) .. ' ' .. num(count), ms(start + window - now)
end

local function fixed_window_check(state, now, cost, limit, window)
  local start, count = fixed_window_count(state, now, window)
  local window_end = ms(start + window - now)
  local reset = 0
  if count > 0 then reset = window_end end
  if cost > limit then
    return false, true, limit - count, 0, reset
  end
  if count + cost <= limit + limit * SLACK then
    count = count + cost
    local after = 0
    if count > 0 then after = window_end end
    local remaining = limit - count
    if not (remaining > 0) then remaining = 0 end
    return true, false, remaining, 0, after, num(start) .. ' ' .. num(count), after
  end
  return false, false, limit - count, window_end, reset
end

-- Only to the window the debit (at its time `at`; nil: now) was counted in.
local function fixed_window_refund(state, now, amount, limit, window, at)
  local start, count = fixed_window_count(state, now, window)
  if at == nil or at - at % window == start then count = math.max(0, count - amount) end
  return fixed_window_stored(start, count, now, window)
end

local function fixed_window_charge(state, now, amount, limit, window)
  local start, count = fixed_window_count(state, now, window)
  return fixed_window_stored(start, count + amount, now, window)
end

checks.fixed_window = fixed_window_check
charges.fixed_window = fixed_window_charge
refunds.fixed_window = fixed_window_refund
