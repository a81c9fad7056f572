-- Sliding window counter: mirrors quotaql.policy.algorithms.sliding_counter / _refund.
-- State (string): "<window start ms> <current count> <previous count>". Params: limit, window.

local function sliding_counter_windows(key, now, window)
  local start = now - now % window
  local raw = redis.call('GET', key)
  if not raw then return start, 0, 0 end
  local old_start, current, previous = string.match(raw, '^(%S+) (%S+) (%S+)$')
  old_start, current, previous = tonumber(old_start), tonumber(current), tonumber(previous)
  if old_start == start then return start, current, previous end
  if start - old_start == window then previous = current else previous = 0 end
  return start, 0, previous
end

local function sliding_counter_check(keys, now, cost, limit, window)
  local start, current, previous = sliding_counter_windows(keys[1], now, window)
  local elapsed = now - start
  local estimated = previous * ((window - elapsed) / window) + current
  local reset = 0
  if current > 0 then
    reset = ms(start + 2 * window - now)
  elseif previous > 0 then
    reset = ms(start + window - now)
  end
  if cost > limit then
    return {false, true, math.max(0, limit - estimated), 0, reset}
  end
  if estimated + cost <= limit then
    current = current + cost
    local ttl = ms(start + 2 * window - now)
    return {true, false, limit - (estimated + cost), 0, ttl, function()
      put(keys[1], num(start) .. ' ' .. num(current) .. ' ' .. num(previous), ttl)
    end}
  end
  local at
  if current + cost <= limit then
    at = start + window - (limit - current - cost) * window / previous
  else
    at = start + window + math.max(0, window - (limit - cost) * window / current)
  end
  return {false, false, math.max(0, limit - estimated), ms(at - now), reset}
end

local function sliding_counter_refund(keys, now, amount, limit, window)
  if redis.call('EXISTS', keys[1]) == 0 then return end
  local start, current, previous = sliding_counter_windows(keys[1], now, window)
  current = math.max(0, current - amount)
  if current == 0 and previous == 0 then
    redis.call('DEL', keys[1])
  else
    put(keys[1], num(start) .. ' ' .. num(current) .. ' ' .. num(previous),
      ms(start + 2 * window - now))
  end
end
