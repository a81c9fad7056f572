-- wrk script of bench/bench_http.py: POST one GraphQL body, check every response.
--
-- Environment: QUOTAQL_WRK_BODY (the JSON body), QUOTAQL_WRK_API_KEY (the X-API-Key),
-- QUOTAQL_WRK_EXPECT (substrings every 200 body must contain, one per line; may be empty).
-- A response counts as bad when its status is not 200, or its body holds "errors" or lacks
-- an expected substring. done() prints one line the bench parses:
--   QUOTAQL_WRK requests duration_us bytes connect read write status timeout bad_status
--               bad_body p50_us p99_us
-- and, when a response was bad, QUOTAQL_WRK_EXAMPLE <the first one, on one line>.

wrk.method = "POST"
wrk.body = assert(os.getenv("QUOTAQL_WRK_BODY"), "QUOTAQL_WRK_BODY is not set")
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-API-Key"] = assert(os.getenv("QUOTAQL_WRK_API_KEY"), "QUOTAQL_WRK_API_KEY is not set")

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  -- Globals of each thread's state, read by done() through thread:get().
  bad_status = 0
  bad_body = 0
  example = ""
  expected = {}
  for needle in string.gmatch(os.getenv("QUOTAQL_WRK_EXPECT") or "", "[^\n]+") do
    table.insert(expected, needle)
  end
end

local function remember(status, body)
  if example == "" then
    example = (status .. " " .. string.sub(body or "", 1, 300)):gsub("%s+", " ")
  end
end

function response(status, headers, body)
  if status ~= 200 then
    bad_status = bad_status + 1
    remember(status, body)
    return
  end
  local bad = string.find(body, '"errors"', 1, true) ~= nil
  for _, needle in ipairs(expected) do
    if not string.find(body, needle, 1, true) then
      bad = true
    end
  end
  if bad then
    bad_body = bad_body + 1
    remember(status, body)
  end
end

function done(summary, latency, requests)
  local status, body, first = 0, 0, ""
  for _, thread in ipairs(threads) do
    status = status + thread:get("bad_status")
    body = body + thread:get("bad_body")
    local seen = thread:get("example")
    if first == "" and seen ~= nil then
      first = seen
    end
  end
  local errors = summary.errors
  io.write(string.format(
    "QUOTAQL_WRK %d %d %d %d %d %d %d %d %d %d %d %d\n",
    summary.requests, summary.duration, summary.bytes,
    errors.connect, errors.read, errors.write, errors.status, errors.timeout,
    status, body, latency:percentile(50), latency:percentile(99)
  ))
  if first ~= "" then
    io.write("QUOTAQL_WRK_EXAMPLE " .. first .. "\n")
  end
end
