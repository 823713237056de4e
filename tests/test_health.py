"""/readyz dependency checks against real services (app/web/health.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis

from app.platform.settings import Settings
from app.web.health import (
    check_bus,
    check_postgres,
    check_redis,
    close_bus_probes,
    readiness,
)
from devstack.process import free_port
from devstack.stack import Stack


def with_(settings: Settings, **overrides: object) -> Settings:
    # Not model_copy: it would carry over the cached ``bus_kind`` of the original.
    return Settings(**(settings.model_dump() | overrides))


@pytest.fixture(scope="module", autouse=True)
async def _close_probes() -> AsyncIterator[None]:
    yield
    await close_bus_probes()


@pytest.fixture
async def blackhole() -> AsyncIterator[int]:
    """A port that accepts TCP connections and never answers: a hung dependency."""
    writers: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        while await reader.read(4096):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    for writer in writers:
        writer.close()
    await server.wait_closed()


def assert_ok(check: dict[str, object]) -> None:
    assert check["status"] == "ok", check
    assert isinstance(check["latency_ms"], float) and check["latency_ms"] >= 0
    assert "error" not in check


async def test_all_up_is_ready(migrated: Settings, db: asyncpg.Pool,
                               redis_client: aioredis.Redis) -> None:
    status, body = await readiness(db, redis_client, migrated)
    assert status == 200 and body["status"] == "ok"
    assert set(body["checks"]) == {"postgres", "redis", "bus"}
    for check in body["checks"].values():
        assert_ok(check)
    assert body["checks"]["bus"]["kind"] == migrated.bus_kind
    # Again, now on the cached Kafka probe client.
    assert (await readiness(db, redis_client, migrated))[0] == 200


async def test_redis_streams_bus_is_a_ping(migrated: Settings,
                                           redis_client: aioredis.Redis) -> None:
    settings = with_(migrated, bus="redis")
    with_client = await check_bus(settings, redis_client)
    assert_ok(with_client)
    assert with_client["kind"] == "redis"
    assert_ok(await check_bus(settings))  # a short-lived client of its own


@pytest.mark.faults
async def test_stopped_redis_is_reported_down_and_the_rest_ok(
        stack: Stack, migrated: Settings, db: asyncpg.Pool,
        redis_client: aioredis.Redis) -> None:
    if stack.redis is None:
        pytest.skip("Redis comes from MESH_REDIS_URL; this test stops only an embedded one")
    await redis_client.ping()
    stack.redis.stop()
    try:
        status, body = await readiness(db, redis_client, migrated, max_wait=1.0)
        assert status == 503 and body["status"] == "down"
        checks = body["checks"]
        assert checks["redis"]["status"] == "down" and checks["redis"]["error"]
        assert_ok(checks["postgres"])
        if migrated.bus_kind == "kafka":
            assert_ok(checks["bus"])
        else:  # the Redis Streams bus lives in the stopped Redis
            assert checks["bus"]["status"] == "down"
    finally:
        stack.redis.start()
        # Leave the shared client usable for the tests after this one.
        for _ in range(50):
            try:
                await redis_client.ping()
                break
            except (aioredis.ConnectionError, OSError):
                await asyncio.sleep(0.1)
    status, body = await readiness(db, redis_client, migrated)
    assert status == 200, body


async def test_closed_postgres_port_is_down_without_waiting(migrated: Settings) -> None:
    # min_size=0: the pool is created without connecting, as a web process whose
    # database went away would hold it.
    pool = await asyncpg.create_pool(
        f"postgresql://postgres@127.0.0.1:{free_port()}/mesh", min_size=0, max_size=1)
    try:
        started = time.perf_counter()
        check = await check_postgres(pool, max_wait=2.0)
        waited = time.perf_counter() - started
    finally:
        await pool.close()
    assert check["status"] == "down" and check["error"]
    assert "no answer within" not in check["error"]  # refused, not timed out
    assert waited < 2.0 + 3.0  # a loose bound: "did not hang", not a speed claim


async def test_hung_dependencies_are_down_after_the_timeout(
        migrated: Settings, blackhole: int) -> None:
    pool = await asyncpg.create_pool(
        f"postgresql://postgres@127.0.0.1:{blackhole}/mesh", min_size=0, max_size=1)
    hung_redis = aioredis.from_url(f"redis://127.0.0.1:{blackhole}/0")
    hung_kafka = with_(migrated, bus="kafka", kafka_bootstrap=f"127.0.0.1:{blackhole}")
    try:
        started = time.perf_counter()
        checks = await asyncio.gather(
            check_postgres(pool, max_wait=0.5),
            check_redis(hung_redis, max_wait=0.5),
            check_bus(hung_kafka, max_wait=0.5),
        )
        waited = time.perf_counter() - started
    finally:
        await hung_redis.aclose()
        pool.terminate()
    for check in checks:
        assert check["status"] == "down", check
        assert check["error"] == "no answer within 0.5 s"
        assert check["latency_ms"] >= 500
    assert waited < 0.5 + 5.0  # bounded by the timeout, not by the dependency


async def test_unreachable_kafka_is_down(migrated: Settings) -> None:
    dead = with_(migrated, bus="kafka", kafka_bootstrap=f"127.0.0.1:{free_port()}")
    check = await check_bus(dead, max_wait=2.0)
    assert check["status"] == "down" and check["kind"] == "kafka" and check["error"]
    missing = with_(migrated, bus="kafka", kafka_bootstrap=None)
    assert (await check_bus(missing))["error"].startswith("bus is kafka but")


async def test_readyz_endpoint_reports_every_dependency(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=10) as client:
        response = await client.get("/readyz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"postgres", "redis", "bus"}


async def test_nats_bus_is_jetstream_account_info(migrated: Settings) -> None:
    if not migrated.nats_url:
        pytest.skip("no nats-server in this environment (CI fails earlier, in conftest)")
    check = await check_bus(with_(migrated, bus="nats"))
    assert_ok(check)
    assert check["kind"] == "nats"
    dead = with_(migrated, bus="nats", nats_url=f"nats://127.0.0.1:{free_port()}")
    check = await check_bus(dead, max_wait=2.0)
    assert check["status"] == "down" and check["kind"] == "nats" and check["error"]
    missing = with_(migrated, bus="nats", nats_url=None)
    assert (await check_bus(missing))["error"].startswith("bus is nats but")
