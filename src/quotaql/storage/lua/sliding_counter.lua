-- Sliding window counter: mirrors quotaql.policy.algorithms.sliding_counter / _refund.
-- State (text): "<window start ms> <current count> <previous count>". Params: limit, window.
-- Returns as token_bucket.lua's.

-- The counts as of now's window (a state from a later window stays as it is).
local function sliding_counter_roll(start, old_start, current, previous, window)
  if old_start >= start then return old_start, current, previous end
  if start - old_start == window then return start, 0, current end
  return start, 0, 0
end

local function sliding_counter_windows(state, now, window)
  local start = now - now % window
  if not state then return start, 0, 0 end
  local old_start, current, previous = string.match(state, '^(%S+) (%S+) (%S+)$')
  return sliding_counter_roll(start, tonumber(old_start), tonumber(current),
    tonumber(previous), window)
end

local function sliding_counter_estimate(start, current, previous, now, window)
  local elapsed = 0
  if now > start then elapsed = now - start end
  return previous * ((window - elapsed) / window) + current
end

local function sliding_counter_reset(start, current, previous, now, window)
  if current > 0 then return ms(start + 2 * window - now) end
  if previous > 0 then return ms(start + window - now) end
  return 0
end

-- The state to store for these counts and its TTL (nil when neither window counts).
local function sliding_counter_stored(start, current, previous, now, window)
  local ttl = sliding_counter_reset(start, current, previous, now, window)
  if ttl == 0 then return nil, 0 end
  return num(start) .. ' ' .. num(current) .. ' ' .. num(previous), ttl
end

local function sliding_counter_check(state, now, cost, limit, window)
  local start, current, previous = sliding_counter_windows(state, now, window)
  local estimated = sliding_counter_estimate(start, current, previous, now, window)
  local reset = sliding_counter_reset(start, current, previous, now, window)
  if cost > limit then
    return false, true, math.max(0, limit - estimated), 0, reset
  end
  if estimated + cost <= limit + limit * SLACK then
    current = current + cost
    local after = sliding_counter_reset(start, current, previous, now, window)
    local remaining = limit - (estimated + cost)
    if not (remaining > 0) then remaining = 0 end
    return true, false, remaining, 0, after,
      num(start) .. ' ' .. num(current) .. ' ' .. num(previous), after
  end
  local at
  if current + cost <= limit then
    at = start + window - (limit - current - cost) * window / previous
  else
    at = start + window + math.max(0, window - (limit - cost) * window / current)
  end
  local retry = ms(at - now)
  if not (retry > 0) then retry = 1 end
  for _ = 1, 3 do
    local later = now + retry
    local s, c, p = sliding_counter_roll(later - later % window, start, current, previous, window)
    if sliding_counter_estimate(s, c, p, later, window) + cost <= limit + limit * SLACK then
      break
    end
    retry = retry + 1
  end
  return false, false, math.max(0, limit - estimated), retry, reset
end

-- To the window the debit (at its time `at`; nil: now) was counted in: current or previous.
local function sliding_counter_refund(state, now, amount, limit, window, at)
  if not state then return nil, 0 end
  local start, current, previous = sliding_counter_windows(state, now, window)
  local debited = start
  if at ~= nil then debited = at - at % window end
  if debited == start then
    current = math.max(0, current - amount)
  elseif debited == start - window then
    previous = math.max(0, previous - amount)
  end
  return sliding_counter_stored(start, current, previous, now, window)
end

local function sliding_counter_charge(state, now, amount, limit, window)
  local start, current, previous = sliding_counter_windows(state, now, window)
  return sliding_counter_stored(start, current + amount, previous, now, window)
end

checks.sliding_counter = sliding_counter_check
charges.sliding_counter = sliding_counter_charge
refunds.sliding_counter = sliding_counter_refund
