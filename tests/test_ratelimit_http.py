"""The rate limit over HTTP, across two real web processes sharing one Redis bucket.

The bound on accepted requests comes from the elapsed time measured on the
clock the bucket refills by (Redis ``TIME``), never from an assumed speed.
"""

from __future__ import annotations

import asyncio
import math

import httpx
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from app.platform.settings import Settings
from tests.support.meshapi import MeshFactory
from tests.support.procs import MeshProcess

RATE, BURST, BURST_REQUESTS = 50.0, 100, 300


async def redis_seconds(redis: aioredis.Redis) -> float:
    sec, usec = await redis.time()
    return sec + usec / 1e6


async def rejected_total(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "agent_mesh_ratelimit_rejected_total":
                return sample.value
    return 0.0


async def test_burst_over_two_web_processes_is_limited_as_one_bucket(
        migrated: Settings, redis_client: aioredis.Redis) -> None:
    settings = Settings(**(migrated.model_dump() | {
        "ratelimit_enabled": True, "ratelimit_rate": RATE, "ratelimit_burst": BURST,
        "ratelimit_routes": {}}))
    webs = [MeshProcess("web", settings), MeshProcess("web", settings)]
    clients: list[httpx.AsyncClient] = []
    try:
        await asyncio.gather(*(w.start() for w in webs))
        clients = [httpx.AsyncClient(base_url=w.url, timeout=30) for w in webs]
        async with MeshFactory.connect(webs[0].url) as mesh:
            owner = await mesh.owner()
            hot, calm = await owner.agent("hot"), await owner.agent("calm")
        before = [await rejected_total(c) for c in clients]

        gate = asyncio.Semaphore(32)

        async def hit(i: int) -> tuple[int, httpx.Response]:
            async with gate:
                return i % 2, await clients[i % 2].get("/v1/mesh/me", headers=hot.headers)

        t0 = await redis_seconds(redis_client)
        results = await asyncio.gather(*(hit(i) for i in range(BURST_REQUESTS)))
        elapsed = await redis_seconds(redis_client) - t0

        accepted = [r for _, r in results if r.status_code == 200]
        denied = [r for _, r in results if r.status_code == 429]
        assert len(accepted) + len(denied) == BURST_REQUESTS, \
            {r.status_code for _, r in results}
        # A full bucket of 100, plus at most what refilled while the burst ran.
        assert BURST <= len(accepted) <= BURST + RATE * elapsed + 1e-6, (len(accepted), elapsed)
        assert denied, f"{BURST_REQUESTS} requests took {elapsed:.2f}s, too slow to empty the bucket"
        for r in denied:
            assert r.headers["content-type"].startswith("application/problem+json")
            body = r.json()
            assert body["status"] == 429 and body["title"] == "Too Many Requests"
            retry_after = int(r.headers["Retry-After"])
            assert retry_after == max(1, math.ceil(body["retry_after"])) >= 1
        # Both processes took part, and each refused some: one bucket, not one each.
        for proc in (0, 1):
            codes = {r.status_code for p, r in results if p == proc}
            assert codes == {200, 429}, (proc, codes)

        # Another agent of the same owner has a bucket of its own.
        for client in clients:
            assert (await client.get("/v1/mesh/me", headers=calm.headers)).status_code == 200

        # Each process counts the 429s it sent; together they are all of them.
        after = [await rejected_total(c) for c in clients]
        assert sum(after) - sum(before) == len(denied)
        assert all(a > b for a, b in zip(after, before, strict=True))
    finally:
        for c in clients:
            await c.aclose()
        for w in webs:
            w.stop_quietly()
