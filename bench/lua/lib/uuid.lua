-- Random UUID v4 keys, the form most clients send: loaded by the scenarios
-- that need fresh keys (dofile, beside the scenario; not a scenario itself).
local M = {}
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

-- Each round (BENCH_RUN) and thread draws its own keys: a key seen in an
-- earlier round would be a replay, not a new key.
function M.seed(thread_id)
  if seeded then return end
  local run = os.getenv("BENCH_RUN") or tostring(os.time())
  local salt = tonumber((run:gsub("%D", ""):sub(-9))) or 0
  math.randomseed(os.time() + salt + (thread_id or 0) * 7919)
  seeded = true
end

function M.uuid()
  -- "4": the version; one of 8, 9, a, b: the variant.
  local variant = math.random(1, 4)
  return digits(8) .. "-" .. digits(4) .. "-4" .. digits(3) .. "-"
    .. ("89ab"):sub(variant, variant) .. digits(3) .. "-" .. digits(12)
end

return M
