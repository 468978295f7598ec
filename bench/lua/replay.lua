-- A fixed set of keys, completed during warm-up: every request is a replay.
local counter = 0
local run = os.getenv("BENCH_RUN") or "replay"
local keys = tonumber(os.getenv("BENCH_KEYS") or "100")
local body = '{"amount":1000,"currency":"eur","customer":"cus_42"}'

function request()
  counter = counter + 1
  return wrk.format("POST", "/v1/charges", {
    ["Idempotency-Key"] = run .. "-fixed-" .. (counter % keys),
    ["Content-Type"] = "application/json",
  }, body)
end
