-- No Idempotency-Key: the route derives the key from the body's order id and
-- the Authorization header (a UUIDv5), a new order id on every request.
local counter = 0
local threads = {}

-- Runs in the main state: gives each thread its own id (a global in its state).
function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

local run = os.getenv("BENCH_RUN") or tostring(os.time())

function request()
  counter = counter + 1
  local order = run .. "-" .. (thread_id or 0) .. "-" .. counter
  return wrk.format("POST", "/v1/charges", {
    ["Authorization"] = "Bearer sk_bench",
    ["Content-Type"] = "application/json",
  }, '{"order_id":"' .. order .. '","amount":1000,"currency":"eur","sent_at":"2026-12-03T10:00:00Z"}')
end
