-- A new random Idempotency-Key on every request, in the UUID v4 form most
-- clients send. new_key.lua's keys are counters, so consecutive inserts land
-- on the same index pages; random keys scatter them, as in production.
local run = os.getenv("BENCH_RUN") or tostring(os.time())
local body = '{"amount":1000,"currency":"eur","customer":"cus_42"}'
local threads = {}

-- Runs in the main state: gives each thread its own id (a global in its state).
function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

local hex = "0123456789abcdef"
local seeded = false

local function digits(n)
  local out = {}
  for i = 1, n do
    local r = math.random(1, 16)
    out[i] = hex:sub(r, r)
  end
  return table.concat(out)
end

local function uuid()
  -- "4": the version; one of 8, 9, a, b: the variant.
  local variant = math.random(1, 4)
  return digits(8) .. "-" .. digits(4) .. "-4" .. digits(3) .. "-"
    .. ("89ab"):sub(variant, variant) .. digits(3) .. "-" .. digits(12)
end

function request()
  if not seeded then
    -- Each round (BENCH_RUN) and thread draws its own keys: a key seen in an
    -- earlier round would be a replay, not a new key.
    local salt = tonumber((run:gsub("%D", ""):sub(-9))) or 0
    math.randomseed(os.time() + salt + (thread_id or 0) * 7919)
    seeded = true
  end
  return wrk.format("POST", "/v1/charges", {
    ["Idempotency-Key"] = uuid(),
    ["Content-Type"] = "application/json",
  }, body)
end
