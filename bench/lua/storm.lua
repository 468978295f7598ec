-- Many connections on a handful of keys: the first of each is executed, the
-- concurrent duplicates get 409, the later ones replay.
local counter = 0
local run = os.getenv("BENCH_RUN") or "storm"
local body = '{"amount":1000,"currency":"eur","customer":"cus_42"}'

function request()
  counter = counter + 1
  return wrk.format("POST", "/v1/charges", {
    ["Idempotency-Key"] = run .. "-storm-" .. (counter % 8),
    ["Content-Type"] = "application/json",
  }, body)
end
