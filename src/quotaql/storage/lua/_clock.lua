-- The script's clock, in ms: the time the caller gave (tests, the multi-region simulation),
-- or Redis's own (TIME: seconds and microseconds), so that every client of one Redis shares
-- one clock.
local function clock(given)
  if given == '' then
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return tonumber(given)
end
