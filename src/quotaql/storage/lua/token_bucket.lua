-- Token bucket: mirrors quotaql.policy.algorithms.token_bucket / token_bucket_refund.
-- State (integer text): when the bucket is full again, in microseconds.
-- Params: capacity, rate (tokens per ms).
-- A check returns: allowed, exceeds capacity, remaining, retry ms, reset ms, and when allowed
-- the state to store and its TTL (ms; 0: the empty state, nothing to keep).

-- With `delay` (ms), a cost that fits within `delay` is reserved: allowed, debited now, and
-- its retry is the wait before it runs.
local function token_bucket_check(state, now, cost, capacity, rate, delay)
  local now_us = now * 1000
  local debt = bucket_debt(state, now_us)
  local tokens = capacity - debt * rate
  if cost > capacity then
    return false, true, tokens, 0, ms(debt)
  end
  if cost <= tokens + capacity * SLACK then
    debt = debt + cost / rate
    local reset = ms(debt)
    local remaining = 0
    if tokens > cost then remaining = tokens - cost end
    return true, false, remaining, 0, reset, num(now_us + math.ceil(debt * 1000)), reset
  end
  if delay > 0 and cost <= tokens + rate * delay + capacity * SLACK then  -- a reservation
    local wait = ms((cost - tokens) / rate)
    debt = debt + cost / rate
    local reset = ms(debt)
    return true, false, tokens - cost, wait, reset, num(now_us + math.ceil(debt * 1000)), reset
  end
  local retry = ms((cost - tokens) / rate - delay)
  if not (retry > 0) then retry = 1 end
  return false, false, tokens, retry, ms(debt)
end

-- Returns the new state (nil: back to full) and its TTL.
local function token_bucket_refund(state, now, amount, capacity, rate)
  return rebucket(state, now, -(amount / rate))
end

-- A debit whether it fits or not: the bucket may go below empty.
local function token_bucket_charge(state, now, amount, capacity, rate)
  return rebucket(state, now, amount / rate)
end

checks.token_bucket = token_bucket_check
charges.token_bucket = token_bucket_charge
refunds.token_bucket = token_bucket_refund
