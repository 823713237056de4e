"""The token bucket both Redis rate limits run: per caller (app.web.ratelimit) and
per address at the unauthenticated doors (app.services.auth_throttle)."""

# KEYS[1] bucket hash {tokens, ts}; ARGV[1] rate (tokens/s), ARGV[2] burst,
# ARGV[3] cost (default 1; 0 = only look, nothing is written: app.services.auth_throttle
# peeks at failure buckets before spending a password hash).
# KEYS[2], optional: the cache epoch (app.delivery.protocol.CACHE_EPOCH_KEY), returned as
# read so a web process learns in this same round trip that a credential or reach
# change happened (ADR 020). NB: a second key; on a Redis Cluster both would need
# one hash slot.
# Returns {allowed 0|1, retry_after_us, floor(tokens left), server_time_us, epoch}.
# Numbers leave Lua as integers only (Redis truncates Lua floats in replies),
# hence microseconds. A missing key is a full bucket, so the key may expire as
# soon as it would have refilled: PEXPIRE = time to refill + 1 s margin.
TOKEN_BUCKET_LUA = """
if redis.replicate_commands then redis.replicate_commands() end  -- Redis < 5: TIME before a write
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or '1')
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
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
  redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
  redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
end
local epoch = 0
if KEYS[2] then epoch = tonumber(redis.call('GET', KEYS[2]) or '0') end
return {allowed, retry_us, math.floor(tokens), now, epoch}
"""
