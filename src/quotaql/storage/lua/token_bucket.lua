-- Token bucket: mirrors quotaql.policy.algorithms.token_bucket / token_bucket_refund.
-- State (integer string): when the bucket is full again, in microseconds.
-- Params: capacity, rate (tokens per ms).

local function token_bucket_check(keys, now, cost, capacity, rate)
  local now_us = now * 1000
  local debt = bucket_debt(keys[1], now_us)
  local tokens = capacity - debt * rate
  if cost > capacity then
    return {false, true, tokens, 0, ms(debt)}
  end
  if cost <= tokens + capacity * SLACK then
    debt = debt + cost / rate
    local reset = ms(debt)
    local remaining = 0
    if tokens > cost then remaining = tokens - cost end
    return {true, false, remaining, 0, reset, function()
      put(keys[1], num(now_us + math.ceil(debt * 1000)), reset)
    end}
  end
  return {false, false, tokens, ms((cost - tokens) / rate), ms(debt)}
end

local function token_bucket_refund(keys, now, amount, capacity, rate)
  local now_us = now * 1000
  local debt = bucket_debt(keys[1], now_us) - amount / rate
  if debt <= 0 then
    redis.call('DEL', keys[1])
  else
    put(keys[1], num(now_us + math.ceil(debt * 1000)), ms(debt))
  end
end

checks.token_bucket = token_bucket_check
refunds.token_bucket = token_bucket_refund
