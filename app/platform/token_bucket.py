"""The token bucket both Redis rate limits run: per caller (app.web.ratelimit) and
per address at the unauthenticated doors (app.services.auth_throttle).

One script call takes from any number of buckets, in order, so the requests that
meet on one web process share a round trip (app.platform.coalescer); the same
bucket may appear more than once and each take sees the one before it."""

from __future__ import annotations

# KEYS[1..n] the bucket hashes {tokens, ts}; ARGV[3i-2..3i] bucket i's rate
# (tokens/s), burst and cost (0 = only look, nothing is written:
# app.services.auth_throttle peeks at failure buckets before spending a password hash).
# KEYS[n+1], optional: the cache epoch (app.delivery.protocol.CACHE_EPOCH_KEY), returned
# as read so a web process learns in this same round trip that a credential or reach
# change happened (ADR 020). NB: several keys; on a Redis Cluster all would need one
# hash slot.
# Returns {server_time_us, epoch, then per bucket: allowed 0|1, retry_after_us,
# floor(tokens left)}. Numbers leave Lua as integers only (Redis truncates Lua floats
# in replies), hence microseconds. A missing key is a full bucket, so the key may
# expire as soon as it would have refilled: PEXPIRE = time to refill + 1 s margin.
TOKEN_BUCKET_LUA = """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 5: TIME before a write
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = #ARGV / 3
local out = {now, 0}
for i = 1, n do
  local key = KEYS[i]
  local rate = tonumber(ARGV[3 * i - 2])
  local burst = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local state = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens = tonumber(state[1])
  local ts = tonumber(state[2])
  if tokens == nil or ts == nil then
    tokens = burst
    ts = now
  end
  local elapsed = now - ts
  if elapsed < 0 then elapsed = 0 end  -- a failover to a replica with a slower clock
  tokens = math.min(burst, tokens + elapsed * rate / 1000000)
  local allowed = 0
  local retry_us = 0
  if tokens >= 1 - 1e-9 then
    tokens = math.max(0, tokens - cost)
    allowed = 1
  else
    retry_us = math.max(1, math.ceil((1 - tokens) * 1000000 / rate))
  end
  if cost > 0 then
    redis.call('HSET', key, 'tokens', tokens, 'ts', now)
    redis.call('PEXPIRE', key, math.ceil((burst - tokens) * 1000 / rate) + 1000)
  end
  out[3 * i] = allowed
  out[3 * i + 1] = retry_us
  out[3 * i + 2] = math.floor(tokens)
end
if KEYS[n + 1] then out[2] = tonumber(redis.call('GET', KEYS[n + 1]) or '0') end
return out
"""


def bucket_args(rate: float, burst: int, cost: int) -> list[str | int]:
    """One bucket's ARGV triple, in the form the script reads."""
    return [repr(rate), burst, cost]
