-- Token bucket: mirrors quotaql.policy.algorithms.token_bucket / token_bucket_refund.
-- State (string): "<tokens> <last refill ms>". Params: capacity, rate (tokens per ms).

local function token_bucket_load(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  local tokens, last = string.match(raw, '^(%S+) (%S+)$')
  return tonumber(tokens), tonumber(last)
end

local function token_bucket_refill(key, now, capacity, rate)
  local tokens, last = token_bucket_load(key)
  if tokens == nil then return capacity, now end
  if now > last then
    tokens = math.min(capacity, tokens + (now - last) * rate)
    last = now
  end
  return tokens, last
end

local function token_bucket_check(keys, now, cost, capacity, rate)
  local tokens, last = token_bucket_refill(keys[1], now, capacity, rate)
  if cost > capacity then
    return {false, true, tokens, 0, ms((capacity - tokens) / rate)}
  end
  if cost <= tokens then
    tokens = tokens - cost
    local reset = ms((capacity - tokens) / rate)
    return {true, false, tokens, 0, reset, function()
      put(keys[1], num(tokens) .. ' ' .. num(last), reset)
    end}
  end
  return {false, false, tokens, ms((cost - tokens) / rate), ms((capacity - tokens) / rate)}
end

local function token_bucket_refund(keys, now, amount, capacity, rate)
  local tokens, last = token_bucket_load(keys[1])
  if tokens == nil then return end
  if now > last then
    tokens = math.min(capacity, tokens + (now - last) * rate)
    last = now
  end
  tokens = math.min(capacity, tokens + amount)
  put(keys[1], num(tokens) .. ' ' .. num(last), ms((capacity - tokens) / rate))
end
