-- GCRA (leaky bucket as a meter): mirrors quotaql.policy.algorithms.gcra / gcra_refund.
-- State (integer text): the theoretical arrival time, in microseconds (bucket_debt reads it).
-- Params: capacity, interval (ms per unit of cost). Returns as token_bucket.lua's.

local function gcra_check(state, now, cost, capacity, interval, delay)
  local now_us = now * 1000
  local debt = bucket_debt(state, now_us)
  local tolerance = capacity * interval
  if cost > capacity then
    return false, true, capacity - debt / interval, 0, ms(debt)
  end
  local new_debt = debt + cost * interval
  if new_debt <= tolerance + tolerance * SLACK then
    local reset = ms(new_debt)
    local remaining = capacity - new_debt / interval
    if not (remaining > 0) then remaining = 0 end
    return true, false, remaining, 0, reset, num(now_us + math.ceil(new_debt * 1000)), reset
  end
  if delay > 0 and new_debt <= tolerance + delay + tolerance * SLACK then  -- a reservation
    local reset = ms(new_debt)
    return true, false, capacity - new_debt / interval, ms(new_debt - tolerance), reset,
      num(now_us + math.ceil(new_debt * 1000)), reset
  end
  local retry = ms(new_debt - tolerance - delay)
  if not (retry > 0) then retry = 1 end
  return false, false, capacity - debt / interval, retry, ms(debt)
end

local function gcra_refund(state, now, amount, capacity, interval)
  return rebucket(state, now, -(amount * interval))
end

local function gcra_charge(state, now, amount, capacity, interval)
  return rebucket(state, now, amount * interval)
end

checks.gcra = gcra_check
charges.gcra = gcra_charge
refunds.gcra = gcra_refund
