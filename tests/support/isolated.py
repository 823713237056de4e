"""A mesh of its own inside the session's services: a fresh database, bus topic
and push consumer group on the same Postgres, Redis and Kafka.

Operations tests act on a whole database (cron expires every silent agent, an
admin retries every dead letter, a relay subprocess relays every pending row),
so they get one nobody else writes to; the session's relay and push worker never
see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from app.platform.migrate import ensure_database, migrate
from app.platform.settings import Settings
from workers import relay as relay_worker
from workers.bus import BusOptions, Publisher
from workers.runtime import Runtime, opened

# Test timeouts: quick to notice a dead broker, patient while Kafka creates a topic.
TEST_BUS = {"publish_timeout": 5.0, "connect_timeout": 20.0, "claim_idle": 5.0,
            "claim_interval": 1.0}


async def isolated_settings(base: Settings, **overrides: Any) -> Settings:
    name = uuid.uuid4().hex[:10]
    url = urlunsplit(urlsplit(base.database_url)._replace(path=f"/mesh_iso_{name}"))
    await ensure_database(url)
    await migrate(url)
    values = base.model_dump() | {"database_url": url, "bus_topic": f"inbox.events.iso-{name}",
                                  "push_group": f"mesh-push-iso-{name}"}
    # Settings(...) rather than model_copy: validation runs, as for a process's env.
    return Settings(**(values | overrides))


def bus_options(settings: Settings, **overrides: Any) -> BusOptions:
    """The deployment's bus options with the test timeouts, and ``overrides``."""
    return BusOptions.from_settings(settings, **(TEST_BUS | overrides))


@contextlib.asynccontextmanager
async def driven_relay(settings: Settings, bus: BusOptions | None = None
                       ) -> AsyncIterator[tuple[relay_worker.Relay, Runtime]]:
    """A relay built as the ``outbox`` process builds it, with its runtime, not
    started: the test drives its batches. Stopped at the end, which closes its
    claim connection."""
    async with opened(settings, bus_options=bus) as rt:
        relay = await relay_worker.build(rt)
        try:
            yield relay, rt
        finally:
            await relay.stop()


async def relay_pending(settings: Settings, **options: Any) -> int:
    """Relay every due pending row once, with a relay built as the ``outbox`` process
    builds it and bus options ``options`` (e.g. ``max_record_bytes=4096``: larger
    events become real dead letters)."""
    async with driven_relay(settings, bus_options(settings, **options)) as (relay, _):
        return await relay.drain()


@contextlib.asynccontextmanager
async def started_publisher(settings: Settings, **options: Any) -> AsyncIterator[Publisher]:
    """A started publisher of the deployment's bus, with bus options ``options``."""
    async with opened(settings, bus_options=bus_options(settings, **options)) as rt:
        yield await rt.publisher()


async def db_now(pool: asyncpg.Pool) -> datetime:
    return await pool.fetchval("SELECT now()")  # type: ignore[no-any-return]


async def outbox_counts(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch("SELECT status, count(*) AS n FROM outbox_events GROUP BY status")
    return {"pending": 0, "sent": 0, "failed": 0} | {r["status"]: r["n"] for r in rows}


async def stream_holds(redis: Any, key: str, count: int) -> bool:
    """Whether the Redis stream ``key`` has at least ``count`` entries (the push
    worker's writes, which nothing announces to a test: a ``wait_until`` check)."""
    return bool(await redis.xlen(key) >= count)


async def wait_until(check: Any, what: str, timeout: float = 60.0, interval: float = 0.05) -> Any:
    """Poll ``check`` (a function, sync or async) until it returns something truthy;
    fail with ``what`` after ``timeout`` seconds. For conditions, never fixed sleeps."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)
