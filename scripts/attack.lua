-- wrk script for scripts/load.sh: GET /users/{id}, half for existing ids of a hot set
-- (HOT, from the environment), half for ids that do not exist, each one new (the
-- penetration traffic). PHASE=warm asks for every id of the hot set in turn (thread t of
-- THREADS asks t, t + THREADS, ...), to fill the service's cache whatever the request rate.
-- MIX=read asks only for the hot set, MIX=absent only for absent ids; CLIENT, if set, is sent
-- as X-Forwarded-For (the throttle's client; "thread" names each thread a client of its own).
local hot = tonumber(os.getenv("HOT") or "10000")
local threads = tonumber(os.getenv("THREADS") or "1")
local warm = os.getenv("PHASE") == "warm"
local mix = os.getenv("MIX") or "half"
local client = os.getenv("CLIENT")
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("seed", counter)
end

function init(args)
  math.randomseed(os.time() * 1000 + (seed or 0))
  next_warm = (seed or 1) - 1
  if client == "thread" then
    wrk.headers["X-Forwarded-For"] = "198.51.100." .. (seed or 0)
  elseif client then
    wrk.headers["X-Forwarded-For"] = client
  end
end

function request()
  local id
  if warm then
    id = next_warm % hot + 1
    next_warm = next_warm + threads
  elseif mix == "read" or (mix ~= "absent" and math.random() < 0.5) then
    id = math.random(1, hot)
  else
    id = math.random(1000000000, 1999999999)
  end
  return wrk.format("GET", "/users/" .. id)
end
