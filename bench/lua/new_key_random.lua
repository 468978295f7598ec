-- A new random Idempotency-Key on every request, in the UUID v4 form most
-- clients send. new_key.lua's keys are counters, so consecutive inserts land
-- on the same index pages; random keys scatter them, as in production.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local keys = dofile(here .. "lib/uuid.lua")
local body = '{"amount":1000,"currency":"eur","customer":"cus_42"}'
local threads = {}

-- Runs in the main state: gives each thread its own id (a global in its state).
function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

function request()
  keys.seed(thread_id)
  return wrk.format("POST", "/v1/charges", {
    ["Idempotency-Key"] = keys.uuid(),
    ["Content-Type"] = "application/json",
  }, body)
end
