-- Sliding log: mirrors quotaql.policy.algorithms.sliding_log / sliding_log_refund.
-- keys[1]: ZSET of admitted calls, score = time ms, member = "<seq, 15 digits>:<cost>"
-- (the zero-padded sequence keeps same-millisecond entries in arrival order).
-- keys[2]: "<total cost> <last seq>". Params: limit, window (ms).
-- Unlike the other algorithms it does its own I/O (the driver passes it its two keys): a
-- check returns as token_bucket.lua's, with a function that writes the entry in place of
-- the state.

local function sliding_log_meta(keys)
  local raw = redis.call('GET', keys[2])
  if not raw then return 0, 0 end
  local total, seq = string.match(raw, '^(%S+) (%S+)$')
  return tonumber(total), tonumber(seq)
end

local function sliding_log_cost(member)
  return tonumber(string.match(member, ':(%S+)$'))
end

-- Forget entries older than one window; the total stays in step with the ZSET.
local function sliding_log_expire(keys, now, window)
  local total, seq = sliding_log_meta(keys)
  local cutoff = now - window
  local expired = redis.call('ZRANGEBYSCORE', keys[1], '-inf', cutoff)
  if #expired > 0 then
    for _, member in ipairs(expired) do
      total = total - sliding_log_cost(member)
    end
    redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', cutoff)
    if redis.call('ZCARD', keys[1]) == 0 then
      total = 0
      redis.call('DEL', keys[2])
    else
      redis.call('SET', keys[2], num(total) .. ' ' .. num(seq), 'KEEPTTL')
    end
  end
  return total, seq
end

local function sliding_log_check(keys, now, cost, limit, window)
  local total, seq = sliding_log_expire(keys, now, window)
  local last = redis.call('ZRANGE', keys[1], -1, -1, 'WITHSCORES')
  local newest = nil
  local reset = 0
  if #last > 0 then
    newest = tonumber(last[2])
    reset = ms(newest + window - now)
  end
  if cost > limit then
    return false, true, limit - total, 0, reset
  end
  if total + cost <= limit + limit * SLACK then
    local remaining = limit - (total + cost)
    if not (remaining > 0) then remaining = 0 end
    if cost == 0 then
      return true, false, remaining, 0, reset
    end
    -- Entries stay in time order even when the clock steps back.
    local at = now
    if newest ~= nil and newest >= now then at = newest end
    local ttl = ms(at + window - now)
    return true, false, remaining, 0, ttl, function()
      seq = seq + 1
      redis.call('ZADD', keys[1], at, string.format('%015d', seq) .. ':' .. num(cost))
      redis.call('PEXPIRE', keys[1], ttl)
      redis.call('SET', keys[2], num(total + cost) .. ' ' .. num(seq), 'PX', ttl)
    end, ttl
  end
  -- The first entry whose expiry makes room, with the admission test's own arithmetic.
  local retry = reset
  local left = total
  local entries = redis.call('ZRANGE', keys[1], 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    left = left - sliding_log_cost(entries[i])
    if left + cost <= limit + limit * SLACK then
      retry = ms(tonumber(entries[i + 1]) + window - now)
      break
    end
  end
  return false, false, limit - total, retry, reset
end

-- From the newest entries made at or before the debit's time `at` (nil: any).
local function sliding_log_refund(keys, now, amount, limit, window, at)
  local total, seq = sliding_log_expire(keys, now, window)
  local entries
  if at == nil then
    entries = redis.call('ZREVRANGE', keys[1], 0, -1, 'WITHSCORES')
  else
    entries = redis.call('ZREVRANGEBYSCORE', keys[1], at, '-inf', 'WITHSCORES')
  end
  local i = 1
  while i <= #entries and amount > 0 do
    local member, when = entries[i], tonumber(entries[i + 1])
    local entry_cost = sliding_log_cost(member)
    redis.call('ZREM', keys[1], member)
    if entry_cost > amount then
      local prefix = string.match(member, '^(%d+):')
      redis.call('ZADD', keys[1], when, prefix .. ':' .. num(entry_cost - amount))
      total = total - amount
      amount = 0
    else
      total = total - entry_cost
      amount = amount - entry_cost
    end
    i = i + 2
  end
  local last = redis.call('ZRANGE', keys[1], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', keys[1], keys[2])
    return
  end
  local ttl = ms(tonumber(last[2]) + window - now)
  redis.call('PEXPIRE', keys[1], math.max(1, ttl))
  if ttl > 0 then
    redis.call('SET', keys[2], num(total) .. ' ' .. num(seq), 'PX', ttl)
  else
    redis.call('DEL', keys[2])
  end
end

-- Log `amount` now whether it fits or not (its own keys, as a check's commit writes them).
local function sliding_log_charge(keys, now, amount, limit, window)
  local total, seq = sliding_log_expire(keys, now, window)
  if not (amount > 0) then return end
  local last = redis.call('ZRANGE', keys[1], -1, -1, 'WITHSCORES')
  local at = now
  if #last > 0 and tonumber(last[2]) >= now then at = tonumber(last[2]) end
  local ttl = ms(at + window - now)
  seq = seq + 1
  redis.call('ZADD', keys[1], at, string.format('%015d', seq) .. ':' .. num(amount))
  redis.call('PEXPIRE', keys[1], ttl)
  redis.call('SET', keys[2], num(total + amount) .. ' ' .. num(seq), 'PX', ttl)
end

checks.sliding_log = sliding_log_check
charges.sliding_log = sliding_log_charge
refunds.sliding_log = sliding_log_refund
logs.sliding_log = true
