"""The per-agent token bucket against a real Redis (app/web/ratelimit.py)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from app.platform.errors import Problem
from app.platform.settings import Settings
from app.web.ratelimit import (
    KEY_PREFIX,
    TOKEN_BUCKET_LUA,
    Decision,
    RateLimiter,
    enforce,
    ratelimit_headers,
    require,
    retry_after_header,
    route_key,
    too_many_requests,
)
from devstack.process import free_port

TASKS_ROUTE = "POST /v1/mesh/tasks"


def limited(base: Settings, **overrides: object) -> Settings:
    # base_settings switches the limiter off for the rest of the suite.
    values: dict[str, object] = {"ratelimit_enabled": True, "ratelimit_rate": 50.0,
                                 "ratelimit_burst": 100, "ratelimit_routes": {}}
    values.update(overrides)
    return base.model_copy(update=values)


def rejected_total() -> float:
    return REGISTRY.get_sample_value("agent_mesh_ratelimit_rejected_total") or 0.0


def replay(times_us: list[int], rate: float, burst: int) -> list[bool]:
    """The bucket's arithmetic in Python, fed the server times the script saw."""
    tokens, last, out = float(burst), times_us[0], []
    for now in times_us:
        tokens = min(burst, tokens + max(0, now - last) * rate / 1000000)
        last = now
        if tokens >= 1 - 1e-9:
            tokens = max(0.0, tokens - 1)
            out.append(True)
        else:
            out.append(False)
    return out


async def test_burst_allows_burst_plus_refill_and_denies_the_rest(
        base_settings: Settings, redis_client: aioredis.Redis, uniq: str) -> None:
    limiter = RateLimiter(redis_client, limited(base_settings))
    agent, other = f"burst-{uniq}@t", f"calm-{uniq}@t"
    before = rejected_total()

    decisions = [await limiter.hit(agent, "GET /v1/mesh/me") for _ in range(300)]

    allowed = [d for d in decisions if d.allowed]
    denied = [d for d in decisions if not d.allowed]
    # Elapsed time on the clock the bucket refills by: Redis TIME, as seen by the script.
    elapsed = decisions[-1].server_time - decisions[0].server_time
    assert elapsed >= 0
    # A full bucket holds 100; at most rate x elapsed more can have been minted.
    assert 100 <= len(allowed) <= 100 + 50.0 * elapsed + 1e-6
    assert decisions[0].remaining == 99 and all(d.allowed for d in decisions[:100])
    assert denied, f"300 hits took {elapsed:.2f}s of Redis time, too slow to exhaust the bucket"
    assert all(0 < d.retry_after <= 1 / 50.0 + 1e-6 for d in denied)
    assert all(d.remaining == 0 and d.limit == 100 for d in denied)
    assert rejected_total() - before == len(denied)
    # Same decisions as the token-bucket arithmetic replayed on the script's own clock.
    times_us = [round(d.server_time * 1e6) for d in decisions]
    assert [d.allowed for d in decisions] == replay(times_us, 50.0, 100)

    # Another agent has its own full bucket.
    fresh = await limiter.hit(other, "GET /v1/mesh/me")
    assert fresh.allowed and fresh.remaining == 99


async def test_two_processes_share_one_bucket(base_settings: Settings, uniq: str) -> None:
    # Two clients, two connection pools: what two web processes would hold.
    # A rate of 0.01/s mints no whole token during the test, so counts are exact.
    settings = limited(base_settings, ratelimit_rate=0.01, ratelimit_burst=10)
    first = aioredis.from_url(settings.redis_url)
    second = aioredis.from_url(settings.redis_url)
    try:
        assert first.connection_pool is not second.connection_pool
        a, b = RateLimiter(first, settings), RateLimiter(second, settings)
        agent = f"shared-{uniq}@t"
        results = [await (a if i % 2 == 0 else b).hit(agent, "GET /v1/mesh/me")
                   for i in range(20)]
        assert sum(d.allowed for d in results) == 10  # not 10 per process
        assert [d.allowed for d in results] == [True] * 10 + [False] * 10
        assert {d.remaining for d in results[10:]} == {0}
    finally:
        await first.aclose()
        await second.aclose()


async def test_route_override_has_its_own_bucket_and_limits(
        base_settings: Settings, redis_client: aioredis.Redis, uniq: str) -> None:
    settings = limited(base_settings, ratelimit_rate=0.01, ratelimit_burst=5,
                       ratelimit_routes={TASKS_ROUTE: (0.01, 3)})
    limiter = RateLimiter(redis_client, settings)
    agent = f"route-{uniq}@t"

    tasks = [await limiter.hit(agent, TASKS_ROUTE) for _ in range(5)]
    assert [d.allowed for d in tasks] == [True] * 3 + [False] * 2
    assert {d.limit for d in tasks} == {3}

    # The default bucket was not touched by the override's hits.
    other = [await limiter.hit(agent, "GET /v1/mesh/me") for _ in range(7)]
    assert [d.allowed for d in other] == [True] * 5 + [False] * 2
    assert {d.limit for d in other} == {5}
    # Unlisted routes share the default bucket.
    assert not (await limiter.hit(agent, "POST /v1/mesh/inbox/ack")).allowed

    # Idle keys expire once they would have refilled: (burst - tokens) / rate + 1 s margin.
    override_ttl = await redis_client.pttl(KEY_PREFIX + agent + ":" + TASKS_ROUTE)
    default_ttl = await redis_client.pttl(KEY_PREFIX + agent)
    assert 0 < override_ttl <= 3 / 0.01 * 1000 + 1000
    assert 0 < default_ttl <= 5 / 0.01 * 1000 + 1000


async def test_idle_key_ttl_is_refill_time_plus_margin(
        base_settings: Settings, redis_client: aioredis.Redis, uniq: str) -> None:
    limiter = RateLimiter(redis_client, limited(base_settings))
    agent = f"ttl-{uniq}@t"
    await limiter.hit(agent, "GET /v1/mesh/me")
    # One token at 50/s refills in 20 ms; the key then lingers at most the 1 s margin.
    assert 0 < await redis_client.pttl(KEY_PREFIX + agent) <= 20 + 1000
    # The script runs by its SHA (EVALSHA), cached on the server.
    assert (await redis_client.script_exists(limiter._script.sha)) == [True]
    assert limiter._script.script == TOKEN_BUCKET_LUA


async def test_refills_after_the_advertised_retry_after(
        base_settings: Settings, redis_client: aioredis.Redis, uniq: str) -> None:
    limiter = RateLimiter(redis_client, limited(base_settings, ratelimit_rate=20.0,
                                                ratelimit_burst=2))
    agent = f"refill-{uniq}@t"
    assert (await limiter.hit(agent, "GET /v1/mesh/me")).allowed
    assert (await limiter.hit(agent, "GET /v1/mesh/me")).allowed
    denied = await limiter.hit(agent, "GET /v1/mesh/me")
    assert not denied.allowed and 0 < denied.retry_after <= 1 / 20.0 + 1e-6

    await asyncio.sleep(denied.retry_after)
    again = await limiter.hit(agent, "GET /v1/mesh/me")
    assert again.allowed
    assert again.server_time - denied.server_time >= denied.retry_after - 1e-6


async def test_fails_open_when_redis_is_unreachable(
        base_settings: Settings, caplog: pytest.LogCaptureFixture, uniq: str) -> None:
    dead = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    try:
        limiter = RateLimiter(dead, limited(base_settings))
        before = rejected_total()
        with caplog.at_level(logging.WARNING, logger="app.web.ratelimit"):
            decisions = [await limiter.hit(f"open-{uniq}@t", "GET /v1/mesh/me")
                         for _ in range(3)]
        assert all(d.allowed and d.fail_open for d in decisions)
        assert rejected_total() == before
        # Logged once, not once per request.
        assert len([r for r in caplog.records if r.name == "app.web.ratelimit"]) == 1
    finally:
        await dead.aclose()


async def test_disabled_limiter_never_calls_redis(base_settings: Settings, uniq: str) -> None:
    dead = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    try:
        limiter = RateLimiter(dead, limited(base_settings, ratelimit_enabled=False))
        decision = await limiter.hit(f"off-{uniq}@t", "GET /v1/mesh/me")
        assert decision.allowed and not decision.fail_open
    finally:
        await dead.aclose()


async def test_enforce_returns_a_problem_429(
        base_settings: Settings, redis_client: aioredis.Redis, uniq: str) -> None:
    limiter = RateLimiter(redis_client, limited(base_settings, ratelimit_rate=0.5,
                                                ratelimit_burst=1))
    agent = f"enforce-{uniq}@t"
    assert await enforce(limiter, agent, "get", "/v1/mesh/me") is None
    response = await enforce(limiter, agent, "get", "/v1/mesh/me", instance="/v1/mesh/me")
    assert response is not None and response.status_code == 429
    assert response.media_type == "application/problem+json"
    assert response.headers["Retry-After"] == "2"  # 1 token at 0.5/s, rounded up
    body = json.loads(bytes(response.body))
    assert body["status"] == 429 and body["instance"] == "/v1/mesh/me"
    assert body["title"] == "Too Many Requests" and "0.5 requests/s" in body["detail"]
    assert 0 < body["retry_after"] <= 2

    with pytest.raises(Problem) as refused:
        await require(limiter, agent, "GET", "/v1/mesh/me")
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "2"


def test_retry_after_header_is_whole_seconds_rounded_up_min_one() -> None:
    def d(retry: float) -> Decision:
        return Decision(False, retry, 0, 100, 50.0)

    assert retry_after_header(d(0.0)) == "1"
    assert retry_after_header(d(0.000001)) == "1"
    assert retry_after_header(d(1.0)) == "1"
    assert retry_after_header(d(1.2)) == "2"
    assert retry_after_header(d(59.01)) == "60"
    assert ratelimit_headers(Decision(True, 0.0, 7, 100, 50.0)) == {
        "RateLimit-Limit": "100", "RateLimit-Remaining": "7"}
    assert too_many_requests(d(0.3)).headers["Retry-After"] == "1"
    assert route_key("post", "/v1/mesh/tasks") == TASKS_ROUTE


def test_rejects_nonsense_limits(base_settings: Settings) -> None:
    with pytest.raises(ValueError, match="rate must be > 0"):
        RateLimiter(aioredis.Redis(), limited(base_settings, ratelimit_routes={
            TASKS_ROUTE: (0.0, 10)}))
    with pytest.raises(ValueError, match="burst >= 1"):
        RateLimiter(aioredis.Redis(), limited(base_settings, ratelimit_burst=0))


async def test_requests_that_meet_share_one_script_call_and_each_sees_the_last(
        base_settings: Settings, redis_client: aioredis.Redis, uniq: str) -> None:
    # A bucket that refills once in 100 s: what the six hits get is the burst alone.
    limiter = RateLimiter(redis_client, limited(base_settings, ratelimit_rate=0.01,
                                                ratelimit_burst=3))
    agent, other = f"meet-{uniq}@t", f"meet-other-{uniq}@t"

    hits = [limiter.hit(agent, TASKS_ROUTE) for _ in range(5)] + [limiter.hit(other, TASKS_ROUTE)]
    decisions = await asyncio.gather(*hits)

    # The first goes out alone; the five that arrive while it is out go together.
    assert limiter.takes_per_call == [1, 5]
    mine = decisions[:5]
    assert [d.allowed for d in mine] == [True, True, True, False, False]
    assert [d.remaining for d in mine[:3]] == [2, 1, 0]
    assert all(d.retry_after > 1 for d in mine[3:])
    assert decisions[5].allowed and decisions[5].remaining == 2
    # One clock and one epoch for a call's buckets.
    assert len({d.server_time for d in decisions[1:]}) == 1
    assert len({d.epoch for d in decisions}) == 1
