-- No key: the request is forwarded untouched, as by any reverse proxy.
local body = '{"amount":1000,"currency":"eur","customer":"cus_42"}'

function request()
  return wrk.format("POST", "/v1/charges", { ["Content-Type"] = "application/json" }, body)
end
