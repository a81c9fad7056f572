-- Fixed window: mirrors quotaql.policy.algorithms.fixed_window / fixed_window_refund.
-- State (string): "<window start ms> <count>". Params: limit, window (ms).

-- The window as of now and its count (a later window's state stays as it is).
local function fixed_window_count(key, now, window)
  local start = now - now % window
  local raw = redis.call('GET', key)
  if not raw then return start, 0 end
  local old_start, count = string.match(raw, '^(%S+) (%S+)$')
  old_start = tonumber(old_start)
  if old_start >= start then return old_start, tonumber(count) end
  return start, 0
end

local function fixed_window_check(keys, now, cost, limit, window)
  local start, count = fixed_window_count(keys[1], now, window)
  local window_end = ms(start + window - now)
  local reset = 0
  if count > 0 then reset = window_end end
  if cost > limit then
    return {false, true, limit - count, 0, reset}
  end
  if count + cost <= limit + limit * SLACK then
    count = count + cost
    local after = 0
    if count > 0 then after = window_end end
    local remaining = limit - count
    if not (remaining > 0) then remaining = 0 end
    return {true, false, remaining, 0, after, function()
      put(keys[1], num(start) .. ' ' .. num(count), after)
    end}
  end
  return {false, false, limit - count, window_end, reset}
end

-- Only to the window the debit (at its time `at`; nil: now) was counted in.
local function fixed_window_refund(keys, now, amount, limit, window, at)
  local start, count = fixed_window_count(keys[1], now, window)
  if at == nil or at - at % window == start then count = math.max(0, count - amount) end
  if count == 0 then
    redis.call('DEL', keys[1])
  else
    put(keys[1], num(start) .. ' ' .. num(count), ms(start + window - now))
  end
end

checks.fixed_window = fixed_window_check
refunds.fixed_window = fixed_window_refund
