-- A new Idempotency-Key on every request: each one reserves, forwards, completes.
local counter = 0
local threads = {}

-- Runs in the main state: gives each thread its own id (a global in its state).
function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

local run = os.getenv("BENCH_RUN") or tostring(os.time())
local body = '{"amount":1000,"currency":"eur","customer":"cus_42"}'

function request()
  counter = counter + 1
  return wrk.format("POST", "/v1/charges", {
    ["Idempotency-Key"] = run .. "-" .. (thread_id or 0) .. "-" .. counter,
    ["Content-Type"] = "application/json",
  }, body)
end
