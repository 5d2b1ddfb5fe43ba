-- wrk script for bench/callgrind.sh: N answers, then wrk exits (its thread:stop() would leave it waiting out -d),
-- so a run serves a known number of requests. One wrk thread. With BENCH_REQUESTS, bench/replay.lua splits the
-- pre-signed requests into the thread's queue; each is sent once, and once they are all sent the connections
-- ask for a path no route serves: those answers (404) are not counted, so the count ends with the last
-- pre-signed request answered.
dofile("bench/replay.lua")

local wanted = tonumber(os.getenv("PROFILE_N") or "0")
local answered, failed = 0, 0
local queue, position

if os.getenv("BENCH_REQUESTS") then
  function init(args)
    local file = assert(io.open((os.getenv("BENCH_WORKDIR") or "/tmp") .. "/queue-0", "r"))
    queue = file:read("*a")
    file:close()
    position = 1
  end

  function request()
    local stop = queue:find("\0", position, true)
    if not stop then return wrk.format("GET", "/__profile_queue_empty__") end
    local raw = queue:sub(position, stop - 1)
    position = stop + 1
    return raw
  end
end

function response(status, headers, body)
  if status == 404 and queue then return end
  answered = answered + 1
  if status ~= 200 then failed = failed + 1 end
  if answered >= wanted then
    io.write(string.format("callgrind.lua: %d answers, %d not 200\n", answered, failed))
    io.flush()
    os.exit(failed == 0 and 0 or 1)
  end
end
