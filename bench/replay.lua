-- wrk script for bench/run.sh. Three optional parts, chosen by environment variables:
--
--   BENCH_REQUESTS=FILE  replay pre-signed requests (`gateway bench prepare`), each sent at most once.
--                        Thread t of BENCH_THREADS takes the devices with device % BENCH_THREADS == t, so a
--                        device's requests all leave one thread in the file's (round-major) order: its
--                        counter c+1 is sent (devices of that thread) requests after counter c.
--                        BENCH_START_ROUND skips the rounds (counters) earlier runs used. A thread that
--                        runs out stops (wrk still waits out -d), and the summary counts it as exhausted:
--                        such a run is reported as EXHAUSTED, never as speed.
--   BENCH_RATE=N         pace the whole run to N requests/s (wrk's delay(); wrk has no -R): each thread
--                        keeps an absolute send schedule of N / BENCH_THREADS per second.
--   BENCH_SUMMARY=FILE   JSON written by done(): throughput, latency percentiles, errors, the next
--                        unused round, and CPU ticks of BENCH_PIDS ("name=pid,pid name2=pid") read from
--                        /proc when the load starts and ends.
--
-- Without BENCH_REQUESTS wrk sends its own static request (the URL on the command line).

local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
  int clock_gettime(int clock, bench_timespec *ts);
]]
local timespec = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, timespec) -- CLOCK_MONOTONIC
  return tonumber(timespec.tv_sec) * 1000 + tonumber(timespec.tv_nsec) / 1e6
end

local requests_file = os.getenv("BENCH_REQUESTS")
local thread_count = tonumber(os.getenv("BENCH_THREADS") or "1")
local start_round = tonumber(os.getenv("BENCH_START_ROUND") or "1")
local rate = tonumber(os.getenv("BENCH_RATE") or "0")
local summary_file = os.getenv("BENCH_SUMMARY")
local workdir = os.getenv("BENCH_WORKDIR") or "/tmp"

-- Main state (setup and done) ----------------------------------------------------------------------

local threads = {}
local per_round = {}  -- devices per thread: requests one round adds to a thread's queue
local first_round    -- the file's first counter
local cpu_start, load_start_ms

local function host_header()
  local host = wrk.host
  if wrk.port then host = host .. ":" .. wrk.port end
  return host
end

-- "<device>\t<round>\t<method>\t<path>\t<body>\t<Header: value>..." to HTTP/1.1 bytes.
local function raw_request(fields)
  local parts = { fields[3] .. " " .. fields[4] .. " HTTP/1.1", "Host: " .. host_header() }
  for i = 6, #fields do parts[#parts + 1] = fields[i] end
  local body = fields[5]
  if body ~= "" or fields[3] == "POST" then parts[#parts + 1] = "Content-Length: " .. #body end
  return table.concat(parts, "\r\n") .. "\r\n\r\n" .. body
end

-- Splits the file into one queue file per thread (NUL-separated raw requests), before any thread runs,
-- so each thread's init only reads one file and the load starts at once.
local function split_requests()
  local input = assert(io.open(requests_file, "r"))
  local queues = {}
  for t = 0, thread_count - 1 do queues[t] = {}; per_round[t] = 0 end
  for line in input:lines() do
    if line:sub(1, 1) ~= "#" then
      local device, round = line:match("^(%d+)\t(%d+)\t")
      device, round = tonumber(device), tonumber(round)
      local t = device % thread_count
      first_round = first_round or round
      if round == first_round then per_round[t] = per_round[t] + 1 end
      if round >= start_round then
        local fields = {}
        for field in (line .. "\t"):gmatch("([^\t]*)\t") do fields[#fields + 1] = field end
        local queue = queues[t]
        queue[#queue + 1] = raw_request(fields)
      end
    end
  end
  input:close()
  start_round = math.max(start_round, first_round or 1)
  for t = 0, thread_count - 1 do
    local out = assert(io.open(workdir .. "/queue-" .. t, "w"))
    out:write(table.concat(queues[t], "\0"))
    if #queues[t] > 0 then out:write("\0") end
    out:close()
  end
end

local function read_cpu_ticks()
  local ticks = {}
  for name, pids in (os.getenv("BENCH_PIDS") or ""):gmatch("(%w+)=([%d,]+)") do
    local total = 0
    for pid in pids:gmatch("%d+") do
      local stat = io.open("/proc/" .. pid .. "/stat", "r")
      if stat then
        local text = stat:read("*a")
        stat:close()
        -- Fields after "(comm) ": state is the 1st, utime the 12th, stime the 13th.
        local rest = text:match("%) (.*)$")
        local fields = {}
        for field in rest:gmatch("%S+") do fields[#fields + 1] = field end
        total = total + tonumber(fields[12]) + tonumber(fields[13])
      end
    end
    ticks[name] = total
  end
  return ticks
end

function setup(thread)
  local id = #threads
  if id == 0 and requests_file then split_requests() end
  thread:set("id", id)
  thread:set("per_round", per_round[id] or 0)
  threads[#threads + 1] = thread
  if id == thread_count - 1 or not requests_file then
    cpu_start = read_cpu_ticks()
    load_start_ms = now_ms()
  end
end

-- Worker threads -----------------------------------------------------------------------------------

sent = 0
exhausted = 0
local queue, position

function init(args)
  if not requests_file then return end
  local file = assert(io.open(workdir .. "/queue-" .. id, "r"))
  queue = file:read("*a")
  file:close()
  position = 1
end

if requests_file then
  function request()
    local stop = queue:find("\0", position, true)
    if not stop then
      exhausted = 1
      wrk.thread:stop()
      return "GET /__bench_exhausted__ HTTP/1.1\r\nHost: " .. host_header() .. "\r\n\r\n"
    end
    local raw = queue:sub(position, stop - 1)
    position = stop + 1
    sent = sent + 1
    return raw
  end
end

if rate > 0 then
  local interval_ms = 1000 * thread_count / rate
  local next_ms
  -- Milliseconds to wait before this connection's next request: the next free slot of the thread's
  -- schedule. A thread that fell over a second behind restarts its schedule instead of bursting.
  function delay()
    local now = now_ms()
    if not next_ms or next_ms < now - 1000 then next_ms = now end
    local slot = next_ms
    next_ms = next_ms + interval_ms
    return math.max(0, math.floor(slot - now))
  end
end

-- Summary ------------------------------------------------------------------------------------------

local function json(value)
  if type(value) == "table" then
    local parts = {}
    for k, v in pairs(value) do parts[#parts + 1] = string.format("%q:%s", k, json(v)) end
    table.sort(parts)
    return "{" .. table.concat(parts, ",") .. "}"
  elseif type(value) == "string" then
    return string.format("%q", value)
  end
  return tostring(value)
end

function done(summary, latency, requests)
  local cpu_end = read_cpu_ticks()
  local load_ms = now_ms() - load_start_ms
  local rounds_used, total_sent, total_exhausted = 0, 0, 0
  for _, thread in ipairs(threads) do
    local thread_sent, thread_per_round = thread:get("sent"), thread:get("per_round")
    total_sent = total_sent + thread_sent
    total_exhausted = total_exhausted + thread:get("exhausted")
    if thread_per_round > 0 then rounds_used = math.max(rounds_used, math.ceil(thread_sent / thread_per_round)) end
  end
  local cpu = {}
  for name, ticks in pairs(cpu_end) do cpu[name] = ticks - (cpu_start[name] or ticks) end
  local errors = summary.errors
  local result = {
    requests = summary.requests,
    duration_s = summary.duration / 1e6,
    rps = summary.requests / (summary.duration / 1e6),
    load_wall_s = load_ms / 1000,
    errors = { connect = errors.connect, read = errors.read, write = errors.write, timeout = errors.timeout,
               non_2xx = errors.status },
    latency_ms = { p50 = latency:percentile(50) / 1000, p90 = latency:percentile(90) / 1000,
                   p99 = latency:percentile(99) / 1000, p999 = latency:percentile(99.9) / 1000,
                   mean = latency.mean / 1000, max = latency.max / 1000 },
    cpu_ticks = cpu,
    target_rate = rate,
    sent = total_sent,
    exhausted = total_exhausted,
    next_round = start_round + rounds_used,
  }
  if summary_file then
    local out = assert(io.open(summary_file, "w"))
    out:write(json(result), "\n")
    out:close()
  end
  io.write(string.format("bench: %.0f req/s, p50 %.2f ms, p99 %.2f ms, non-2xx %d, socket errors %d\n",
    result.rps, result.latency_ms.p50, result.latency_ms.p99, errors.status,
    errors.connect + errors.read + errors.write + errors.timeout))
end
