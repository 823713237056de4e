"""Real services for the whole test session.

With ``MESH_DATABASE_URL`` / ``MESH_REDIS_URL`` / ``MESH_KAFKA_BOOTSTRAP`` /
``MESH_NATS_URL`` set, those are used; otherwise the embedded stack (devstack)
starts real Postgres, Redis, Kafka and NATS in a temporary folder, removed at the
end of the session. In CI (``CI=true``) a missing Kafka or nats-server is an
error, never a silent skip (``devstack.bus.KafkaPolicy``, ``NatsPolicy``).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import redis.asyncio as aioredis

from app.platform.migrate import ensure_database, migrate
from app.platform.settings import Settings
from devstack.bus import KafkaPolicy, NatsPolicy
from devstack.leftovers import scratch_data_dir
from devstack.stack import Ports, Stack
from tests.support import procs
from tests.support.meshapi import MeshFactory
from tests.support.pipeline import Pipeline, run_pipeline


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """The session's services, in a temporary folder that is removed at the end
    (with the mesh processes' logs, see ``tests.support.procs.LOG_DIR``). A session
    killed before that leaves its folder locked by nobody: the next session stops
    its services and removes it (``devstack.leftovers.scratch_data_dir``)."""
    with scratch_data_dir("mesh-test-") as root:
        ci = os.environ.get("CI") == "true"
        s = Stack(root, Ports.ephemeral(), kafka_policy=KafkaPolicy.for_tests(ci=ci),
                  nats_policy=NatsPolicy.for_tests(ci=ci))
        procs.LOG_DIR = root / "logs"
        procs.LOG_DIR.mkdir()
        try:
            s.start()
            yield s
        finally:
            procs.LOG_DIR = None
            s.discard()


@pytest.fixture(scope="session")
def service_urls(stack: Stack) -> dict[str, str]:
    """MESH_DATABASE_URL, MESH_REDIS_URL and, with Kafka/NATS, MESH_KAFKA_BOOTSTRAP/MESH_NATS_URL."""
    return {k: v for k, v in stack.urls.items() if k != "MESH_BUS"}


@pytest.fixture(scope="session")
def base_settings(service_urls: dict[str, str]) -> Settings:
    return Settings(
        database_url=service_urls["MESH_DATABASE_URL"],
        redis_url=service_urls["MESH_REDIS_URL"],
        kafka_bootstrap=service_urls.get("MESH_KAFKA_BOOTSTRAP"),
        nats_url=service_urls.get("MESH_NATS_URL"),
        jwt_secret="test-secret-" + "x" * 32,
        admin_usernames=["admin"],
        relay_retry_base_seconds=0.2,
        ratelimit_enabled=False,
        # The suite registers hundreds of owners from 127.0.0.1; tests/test_auth_throttle.py
        # turns it on for gateways of its own.
        auth_throttle_enabled=False,
        # A blocking A2A SendMessage answers after this when the task has not settled
        # (ADR 036); tests/test_a2a_blocking.py runs gateways with a longer window.
        a2a_blocking_seconds=0.5,
    )


@pytest.fixture(scope="session")
async def migrated(base_settings: Settings) -> Settings:
    await ensure_database(base_settings.database_url)
    await migrate(base_settings.database_url)
    return base_settings


@pytest.fixture(scope="session")
async def db(migrated: Settings) -> AsyncIterator[asyncpg.Pool]:
    from app.platform.db import create_pool

    pool = await create_pool(migrated, min_size=1, max_size=10)
    yield pool
    await pool.close()


@pytest.fixture(scope="session")
async def redis_client(migrated: Settings) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(migrated.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def uniq() -> str:
    """A short unique token for names, so tests never collide on shared state."""
    return uuid.uuid4().hex[:8]


# --- the gateway under test ------------------------------------------------------

@pytest.fixture(scope="session")
async def pipeline(migrated: Settings) -> AsyncIterator[Pipeline]:
    """The real gateway (uvicorn on a free port) with the outbox relay and the
    push fan-out running over the session's Kafka (or Redis Streams without it)."""
    async with run_pipeline(migrated) as running:
        yield running


@pytest.fixture(scope="session")
async def gateway(pipeline: Pipeline) -> str:
    """Base URL of the running gateway (relay and push included)."""
    return pipeline.url


@pytest.fixture
async def mesh(gateway: str) -> AsyncIterator[MeshFactory]:
    async with MeshFactory.connect(gateway) as factory:
        yield factory


# --- a mesh of its own (operations tests act on a whole database) -------------------

@pytest.fixture
async def iso(migrated: Settings) -> Settings:
    """Settings for a fresh database, bus topic and push group on the session's services."""
    from tests.support.isolated import isolated_settings

    return await isolated_settings(migrated)


@pytest.fixture
async def quiet_webs(iso: Settings) -> AsyncIterator[list[procs.MeshProcess]]:
    """Two web processes on the ``iso`` database whose readers never re-read Postgres
    on a timer of their own (the long-poll and SSE re-checks an hour): within a
    test's timeouts only a notice can wake a parked long-poll or an open stream."""
    quiet = {"longpoll_recheck_seconds": 3600.0, "sse_recheck_seconds": 3600.0}
    webs = [procs.MeshProcess("web", iso, **quiet), procs.MeshProcess("web", iso, **quiet)]
    try:
        await asyncio.gather(*(w.start() for w in webs))
        yield webs
    finally:
        for w in webs:
            w.stop_quietly()


@pytest.fixture
async def pool(iso: Settings) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the ``iso`` database."""
    from app.platform.db import create_pool

    p = await create_pool(iso, min_size=1, max_size=6)
    yield p
    await p.close()
