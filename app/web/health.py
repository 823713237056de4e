"""Dependency checks behind ``GET /readyz``: Postgres, Redis and the bus.

Each check returns ``{"status": "ok"|"down", "latency_ms": float, "error"?: str}``
within ``max_wait`` seconds (default 2), so a hung dependency is reported down instead of
hanging the probe. :func:`readiness` runs them concurrently and answers 200 only
when all are ok, else 503 with every state, so an operator sees at once which
dependency is missing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from aiokafka.admin import AIOKafkaAdminClient

from app.platform.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 2.0

Check = dict[str, Any]


async def _timed(probe: Awaitable[object], max_wait: float) -> Check:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(max_wait):
            await probe
    except TimeoutError:
        status: Check = {"status": "down", "error": f"no answer within {max_wait:g} s"}
    except Exception as exc:  # any failure of a dependency means "down", with why
        status = {"status": "down", "error": f"{type(exc).__name__}: {exc}"[:500]}
    else:
        status = {"status": "ok"}
    status["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return status


async def check_postgres(pool: asyncpg.Pool, max_wait: float = DEFAULT_TIMEOUT) -> Check:
    return await _timed(pool.fetchval("SELECT 1"), max_wait)


async def check_redis(redis: aioredis.Redis, max_wait: float = DEFAULT_TIMEOUT) -> Check:
    return await _timed(redis.ping(), max_wait)


# One admin client per (bootstrap servers, event loop): a metadata request on a
# connected client costs one round trip, a fresh client costs a TCP connect and an
# ApiVersions exchange per probe. A client whose check failed is dropped, so a
# broker that comes back is probed over a fresh connection, not a wedged one.
_kafka_admins: dict[tuple[str, int], AIOKafkaAdminClient] = {}
# Background closes of dropped clients; referenced so they are not garbage-collected.
_closing: set[asyncio.Task[None]] = set()


async def _kafka_metadata(bootstrap: str, max_wait: float, security_protocol: str) -> None:
    key = (bootstrap, id(asyncio.get_running_loop()))
    admin = _kafka_admins.get(key)
    try:
        if admin is None:
            from workers.bus import KafkaOptions
            from workers.bus_kafka_topic import connection_options

            admin = AIOKafkaAdminClient(
                bootstrap_servers=bootstrap, request_timeout_ms=max(1, int(max_wait * 1000)),
                **connection_options(KafkaOptions(security_protocol=security_protocol)))
            _kafka_admins[key] = admin
            await admin.start()  # bootstrap: ApiVersions + a metadata request
        await admin.describe_cluster()  # a metadata request to a live broker
    except BaseException:  # also on cancellation by the timeout
        _kafka_admins.pop(key, None)
        if admin is not None:
            # Closing must not itself hang the probe past its deadline.
            task = asyncio.ensure_future(_close_quietly(admin))
            _closing.add(task)
            task.add_done_callback(_closing.discard)
        raise


async def _close_quietly(admin: AIOKafkaAdminClient) -> None:
    try:
        await admin.close()
    except Exception:
        log.debug("closing a failed Kafka health probe client failed", exc_info=True)


async def close_bus_probes() -> None:
    """Close cached Kafka probe clients (call at shutdown)."""
    admins = list(_kafka_admins.values())
    _kafka_admins.clear()
    for admin in admins:
        await _close_quietly(admin)


async def check_bus(settings: Settings, redis: aioredis.Redis | None = None,
                    max_wait: float = DEFAULT_TIMEOUT) -> Check:
    """Kafka: a metadata request. NATS: connect and JetStream account info.
    Redis Streams: PING on the bus Redis.

    ``redis`` is the bus's Redis client (settings.redis_url); without one a
    short-lived client is made for the probe.
    """
    if settings.bus_kind == "kafka":
        if not settings.kafka_bootstrap:
            return {"status": "down", "latency_ms": 0.0,
                    "error": "bus is kafka but MESH_KAFKA_BOOTSTRAP is not set"}
        status = await _timed(
            _kafka_metadata(settings.kafka_bootstrap, max_wait, settings.kafka_security_protocol),
            max_wait)
        status["kind"] = "kafka"
        return status
    if settings.bus_kind == "nats":
        if not settings.nats_url:
            return {"status": "down", "latency_ms": 0.0,
                    "error": "bus is nats but MESH_NATS_URL is not set"}
        from workers.bus_nats_stream import probe

        status = await _timed(probe(settings.nats_url, max_wait), max_wait)
        status["kind"] = "nats"
        return status
    if redis is not None:
        status = await check_redis(redis, max_wait)
    else:
        client = aioredis.from_url(settings.redis_url)
        try:
            status = await check_redis(client, max_wait)
        finally:
            await client.aclose()
    status["kind"] = "redis"
    return status


async def readiness(pool: asyncpg.Pool, redis: aioredis.Redis, settings: Settings,
                    max_wait: float = DEFAULT_TIMEOUT) -> tuple[int, dict[str, Any]]:
    """(200 | 503, {"status", "checks": {"postgres", "redis", "bus"}}) for /readyz."""
    postgres, redis_status, bus = await asyncio.gather(
        check_postgres(pool, max_wait),
        check_redis(redis, max_wait),
        check_bus(settings, redis, max_wait),
    )
    checks = {"postgres": postgres, "redis": redis_status, "bus": bus}
    ready = all(c["status"] == "ok" for c in checks.values())
    return (200 if ready else 503), {"status": "ok" if ready else "down", "checks": checks}
