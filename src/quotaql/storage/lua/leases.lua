-- quotaql leases: concurrency limits, one script call per decision (quotaql/storage/leases.py).
-- A lease set is a ZSET per (tenant, limit): member = lease id, score = when the lease
-- expires, in ms of the server's clock. A lease is live while its score is above now; an
-- expired one is dropped before anything counts it, so a holder that crashed (and stopped
-- renewing) frees its slot by itself within its ttl. The key's own TTL is only ever raised to
-- the longest ttl given to it, so a set lives as long as its longest lease and no longer.
--
-- KEYS: lease sets of one tenant (one hash tag: one Redis Cluster slot, one call).
-- ARGV[1] mode: take | release | renew | count
-- ARGV[2] now in ms ('' reads the server's TIME)
-- take:    ARGV[3] ttl ms, ARGV[4] lease id, ARGV[4 + i] the maximum of KEYS[i].
--          All or nothing: refused if any set is at its maximum without this lease in it;
--          else the lease goes into every set (a lease already held there is not counted
--          again: only its expiry moves, never back).
--          Returns {now, index of the refusing set (0: taken), ms until its earliest lease
--          expires (-1: taken), then per set its live leases (after taking, or at refusal)}.
-- release: ARGV[3] lease id. Returns {now, sets in which the lease was still live}.
-- renew:   ARGV[3] ttl ms, ARGV[4...] lease ids. A live lease expires at now + ttl unless it
--          already expires later; an absent or expired one is not brought back (ZADD XX).
--          Returns {now, (set, lease) pairs renewed}.
-- count:   Returns {now, live leases of KEYS[1]}.
-- Lease ids are whole arguments, never parsed; numbers go to Redis as integer text.

local mode = ARGV[1]
local now = clock(ARGV[2])
local now_text = string.format('%d', now)

-- The set lives at least ttl ms more (PTTL: -2 no key, -1 no expiry yet): never shortened.
local function keep(key, ttl)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, string.format('%d', ttl))
  end
end

if mode == 'take' then
  local ttl = tonumber(ARGV[3])
  local lease = ARGV[4]
  local counts = {}
  local held = {}
  local refused = 0
  for i, key in ipairs(KEYS) do
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now_text)
    local n = redis.call('ZCARD', key)
    held[i] = redis.call('ZSCORE', key, lease) ~= false
    counts[i] = n
    if refused == 0 and not held[i] and n >= tonumber(ARGV[4 + i]) then refused = i end
  end
  if refused > 0 then
    local first = redis.call('ZRANGE', KEYS[refused], 0, 0, 'WITHSCORES')
    return {now, refused, tonumber(first[2]) - now, unpack(counts)}
  end
  local expiry = string.format('%d', now + ttl)
  for i, key in ipairs(KEYS) do
    redis.call('ZADD', key, 'GT', expiry, lease)
    if not held[i] then counts[i] = counts[i] + 1 end
    keep(key, ttl)
  end
  return {now, 0, -1, unpack(counts)}
end

if mode == 'release' then
  local lease = ARGV[3]
  local held = 0
  for _, key in ipairs(KEYS) do
    local score = redis.call('ZSCORE', key, lease)
    if score then
      redis.call('ZREM', key, lease)
      if tonumber(score) > now then held = held + 1 end
    end
  end
  return {now, held}
end

if mode == 'renew' then
  local ttl = tonumber(ARGV[3])
  local expiry = now + ttl
  local expiry_text = string.format('%d', expiry)
  local renewed = 0
  for _, key in ipairs(KEYS) do
    -- Expired leases go first: XX would otherwise bring them back.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now_text)
    local found = 0
    for j = 4, #ARGV do
      local score = redis.call('ZSCORE', key, ARGV[j])
      if score then
        found = found + 1
        if tonumber(score) < expiry then redis.call('ZADD', key, 'XX', expiry_text, ARGV[j]) end
      end
    end
    if found > 0 then keep(key, ttl) end
    renewed = renewed + found
  end
  return {now, renewed}
end

if mode == 'count' then
  return {now, redis.call('ZCOUNT', KEYS[1], '(' .. now_text, '+inf')}
end

return redis.error_reply('quotaql: unknown lease mode ' .. tostring(mode))
