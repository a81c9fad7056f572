-- Fixed window: mirrors quotaql.policy.algorithms.fixed_window / fixed_window_refund.
-- State (string): "<window start ms> <count>". Params: limit, window (ms).

local function fixed_window_count(key, start)
  local raw = redis.call('GET', key)
  if not raw then return 0 end
  local old_start, count = string.match(raw, '^(%S+) (%S+)$')
  if tonumber(old_start) == start then return tonumber(count) end
  return 0
end

local function fixed_window_check(keys, now, cost, limit, window)
  local start = now - now % window
  local count = fixed_window_count(keys[1], start)
  local reset = ms(start + window - now)
  if cost > limit then
    local shown = 0
    if count > 0 then shown = reset end
    return {false, true, limit - count, 0, shown}
  end
  if count + cost <= limit then
    count = count + cost
    return {true, false, limit - count, 0, reset, function()
      put(keys[1], num(start) .. ' ' .. num(count), reset)
    end}
  end
  return {false, false, limit - count, reset, reset}
end

local function fixed_window_refund(keys, now, amount, limit, window)
  local start = now - now % window
  local count = fixed_window_count(keys[1], start)
  if count == 0 then return end
  count = math.max(0, count - amount)
  if count == 0 then
    redis.call('DEL', keys[1])
  else
    put(keys[1], num(start) .. ' ' .. num(count), ms(start + window - now))
  end
end
