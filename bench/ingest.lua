-- wrk script for bench/ingest: signed issues.labeled bodies, a new delivery id and body per request.
-- Baton stores a body once (the signature covers the body, not the id), so each body ends with its
-- delivery id; bench/ingest signed them beforehand, one file of signatures per wrk thread.
local counter = 0
-- thread_id: a global each wrk thread gets from setup() (thread:set), 1-based
local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("thread_id", next_id)
  table.insert(threads, thread)
end

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  return text
end

function init(args)
  prefix = slurp(args[1] .. "/prefix.json")
  suffix = slurp(args[1] .. "/suffix.json")
  signatures = {}
  for line in io.lines(args[1] .. "/sig-" .. thread_id .. ".txt") do
    signatures[#signatures + 1] = line
  end
  run_tag = tonumber(args[3])
end

function request()
  counter = counter + 1
  local delivery = string.format("%08x-%04x-4000-8000-%012x", run_tag, thread_id, counter)
  -- Past the prepared signatures: unsigned, so it is answered 401 and counted as non-2xx.
  local signature = signatures[counter] or "sha256=none"
  local headers = {
    ["Content-Type"] = "application/json",
    ["User-Agent"] = "GitHub-Hookshot/bench",
    ["X-GitHub-Event"] = "issues",
    ["X-GitHub-Delivery"] = delivery,
    ["X-Hub-Signature-256"] = signature,
  }
  return wrk.format("POST", "/api/github/webhooks", headers, prefix .. delivery .. suffix)
end

function done(summary, latency, requests)
  local non2xx = summary.errors.status
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "non2xx": %d, "connect_errors": %d, "read_errors": %d, ' ..
    '"write_errors": %d, "timeouts": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, non2xx, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
