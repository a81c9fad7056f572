-- GCRA (leaky bucket as a meter): mirrors quotaql.policy.algorithms.gcra / gcra_refund.
-- State (string): "<theoretical arrival time ms>". Params: interval (ms per unit), tolerance (ms).

local function gcra_check(keys, now, cost, interval, tolerance)
  local tat = tonumber(redis.call('GET', keys[1]) or nil)
  if tat == nil or tat < now then tat = now end
  if cost * interval > tolerance then
    return {false, true, (tolerance - (tat - now)) / interval, 0, ms(tat - now)}
  end
  local new_tat = tat + cost * interval
  if new_tat - now <= tolerance then
    local reset = ms(new_tat - now)
    return {true, false, (tolerance - (new_tat - now)) / interval, 0, reset, function()
      put(keys[1], num(new_tat), reset)
    end}
  end
  return {false, false, (tolerance - (tat - now)) / interval, ms(new_tat - tolerance - now),
    ms(tat - now)}
end

local function gcra_refund(keys, now, amount, interval, tolerance)
  local tat = tonumber(redis.call('GET', keys[1]) or nil)
  if tat == nil or tat <= now then return end
  tat = tat - amount * interval
  if tat <= now then
    redis.call('DEL', keys[1])
  else
    put(keys[1], num(tat), ms(tat - now))
  end
end
