-- One send per request (POST /v1/mesh/tasks), for wrk:
--
--   MESH_CAST=cast.txt MESH_RUN=r1 wrk -t2 -c16 -d20s -s bench/wrk/send.lua http://127.0.0.1:8080
--
-- The cast file (written by bench/blackbox.py): the first line lists the recipients'
-- agent ids, every other line is one sender's bearer token. Each request comes from
-- the thread's next sender, to a random recipient, with a message id unique in the
-- run (m-wrk-<MESH_RUN>-<thread>-<n>) so the count of rows written can be checked
-- against the count of 201s. At the end one line "WRK_RESULT {json}" sums the
-- threads' status counts and gives the latency percentiles in microseconds.

local TEXT = "benchmark message " .. string.rep("x", 80)
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local function split(line)
  local out = {}
  for word in string.gmatch(line, "%S+") do table.insert(out, word) end
  return out
end

function init(args)
  local f = assert(io.open(assert(os.getenv("MESH_CAST"), "MESH_CAST is not set"), "r"))
  recipients = split(f:read("*l"))
  senders = {}
  for line in f:lines() do
    if #line > 0 then table.insert(senders, line) end
  end
  f:close()
  run = os.getenv("MESH_RUN") or tostring(os.time())
  sent, created, refused = 0, 0, 0
  math.randomseed(os.time() + id)
end

function request()
  sent = sent + 1
  local token = senders[(sent + id * 31) % #senders + 1]
  local to = recipients[math.random(#recipients)]
  local body = string.format(
    '{"to_agent_id":"%s","message":{"message_id":"m-wrk-%s-%d-%d","parts":[{"kind":"text","text":"%s"}]}}',
    to, run, id, sent, TEXT)
  return wrk.format("POST", "/v1/mesh/tasks",
    {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
  if status == 201 then created = created + 1 else refused = refused + 1 end
end

function done(summary, latency, requests)
  local c, r = 0, 0
  for _, t in ipairs(threads) do
    c = c + t:get("created")
    r = r + t:get("refused")
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"duration_us":%d,"created":%d,"refused":%d,' ..
    '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, c, r, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
