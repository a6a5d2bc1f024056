-- wrk script for scripts/load.sh: GET /users/{id}, half for existing ids of a hot set
-- (HOT, from the environment), half for ids that do not exist, each one new (the
-- penetration traffic). PHASE=warm asks only the hot set, to fill the service's cache.
local hot = tonumber(os.getenv("HOT") or "10000")
local warm = os.getenv("PHASE") == "warm"
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("seed", counter)
end

function init(args)
  math.randomseed(os.time() * 1000 + (seed or 0))
end

function request()
  local id
  if warm or math.random() < 0.5 then
    id = math.random(1, hot)
  else
    id = math.random(1000000000, 1999999999)
  end
  return wrk.format("GET", "/users/" .. id)
end
