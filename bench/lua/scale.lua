-- bench/scale's load on a store holding many records: a share of requests
-- (BENCH_NEW_SHARE, 0 to 1) with a new random UUID v4 key, the rest replays
-- of keys drawn at random from BENCH_KEYS_FILE (one key per line, records the
-- store already holds under this body's fingerprint: bench/prefill FINGERPRINT).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local keys = dofile(here .. "lib/uuid.lua")
local body = '{"amount":1000,"currency":"eur","customer":"cus_42"}'
local new_share = tonumber(os.getenv("BENCH_NEW_SHARE") or "1")
local threads = {}
local held = nil

function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

local function load_held()
  held = {}
  local path = os.getenv("BENCH_KEYS_FILE")
  if path and new_share < 1 then
    for line in io.lines(path) do held[#held + 1] = line end
  end
  if new_share < 1 and #held == 0 then
    error("scale.lua: replays need keys in BENCH_KEYS_FILE")
  end
end

function request()
  if held == nil then load_held() end
  keys.seed(thread_id)
  local key
  if math.random() < new_share then
    key = keys.uuid()
  else
    key = held[math.random(1, #held)]
  end
  return wrk.format("POST", "/v1/charges", {
    ["Idempotency-Key"] = key,
    ["Content-Type"] = "application/json",
  }, body)
end
