-- wrk script for bench/ingest: one signed issues.labeled body, a new delivery id per request.
-- The signature covers the body only, so it is computed once by bench/ingest and passed in.
local counter = 0
local thread_id = 0
local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("thread_id", next_id)
  table.insert(threads, thread)
end

function init(args)
  local f = assert(io.open(args[1], "rb"))
  body = f:read("*a")
  f:close()
  signature = args[2]
  run_tag = tonumber(args[3])
end

function request()
  counter = counter + 1
  local delivery = string.format("%08x-%04x-4000-8000-%012x", run_tag, thread_id, counter)
  local headers = {
    ["Content-Type"] = "application/json",
    ["User-Agent"] = "GitHub-Hookshot/bench",
    ["X-GitHub-Event"] = "issues",
    ["X-GitHub-Delivery"] = delivery,
    ["X-Hub-Signature-256"] = signature,
  }
  return wrk.format("POST", "/api/github/webhooks", headers, body)
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
