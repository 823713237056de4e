"""One after-commit path: every code path that writes events wakes the
relay once its transaction commits — an HTTP send, the cron task timeout, an
admin dead-letter retry — so delivery does not wait for the relay's sweep.

The relay's sweep is set to 10 minutes, so anything delivered within the test's
30 s came from a wake-up. Delivery is observed in the recipient's Redis Stream,
which only the push worker writes, from what the relay put on the bus (an SSE or
long-poll read would also find the event in Postgres, with or without a relay).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
import redis.asyncio as aioredis

from app.delivery.protocol import inbox_stream_key
from app.platform.settings import Settings
from app.store import writes as writes_module
from cron import jobs
from tests.support.isolated import db_now, relay_pending, started_publisher, wait_until
from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle
from tests.support.pipeline import run_pipeline, run_workers
from tests.support.servers import serve_app

SWEEP_MINUTES = 10


@pytest.fixture
def quiet(iso: Settings) -> Settings:
    return iso.model_copy(update={"relay_sweep_seconds": SWEEP_MINUTES * 60.0})


@pytest.fixture
async def redis(quiet: Settings) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(quiet.redis_url)
    yield client
    await client.aclose()


async def pushed(redis: aioredis.Redis, agent: AgentHandle, seq: int) -> dict:
    """Wait (blocking XREAD, no polling) until ``seq`` is in the agent's stream."""
    key, last = inbox_stream_key(agent.agent_id), f"{seq - 1}-0"
    async with asyncio.timeout(30):
        while True:
            reply = await redis.xread({key: last}, block=5000)
            for _, entries in reply:
                for entry_id, fields in entries:
                    event = json.loads(fields[b"e"])
                    if event["seq"] == seq:
                        return event  # type: ignore[no-any-return]
                    last = entry_id


async def relay_listening(pool: asyncpg.Pool) -> bool:
    """The relay's LISTEN connection is up, so its start-up drain is behind it."""
    return bool(await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND query ILIKE 'LISTEN%'"))


async def test_http_send_and_cron_timeout_wake_the_relay(quiet: Settings, pool: asyncpg.Pool,
                                                         redis: aioredis.Redis) -> None:
    async with run_pipeline(quiet) as pipe, MeshFactory.connect(pipe.url) as mesh:
        a, b = await mesh.pair()                        # a: seq 1, b: seq 1 (friend events)
        await wait_until(lambda: relay_listening(pool), "the relay's LISTEN connection")
        first = await a.send(b.agent_id, "before")      # b: seq 2
        assert (await pushed(redis, b, 2))["task_id"] == first["task_id"]

        # HTTP: a send while the relay is idle.
        second = await a.send(b.agent_id, "idle relay")  # b: seq 3
        assert (await pushed(redis, b, 3))["task_id"] == second["task_id"]

        # Cron: the activity timeout fails both tasks; both agents hear of each.
        later = await db_now(pool) + timedelta(seconds=quiet.task_timeout_seconds + 1)
        moved = await jobs.time_out_tasks(pool, quiet, now=later)
        assert sorted(moved) == sorted([first["task_id"], second["task_id"]])
        timeouts_b = [await pushed(redis, b, seq) for seq in (4, 5)]
        timeouts_a = [await pushed(redis, a, seq) for seq in (2, 3)]
        for event in timeouts_a + timeouts_b:
            assert event["type"] == "task.timeout"
        assert {e["task_id"] for e in timeouts_a} == set(moved)


async def test_admin_dead_letter_retry_wakes_the_relay(quiet: Settings, pool: asyncpg.Pool,
                                                       redis: aioredis.Redis) -> None:
    async with serve_app(quiet) as url, MeshFactory.connect(url) as mesh:
        admin: OwnerHandle = await mesh.owner("admin")  # in base_settings.admin_usernames
        a, b = await mesh.pair()
        big = await a.send(b.agent_id, "x" * 6000)      # b: seq 2
        # The topic is created at the full record size first: the 4 KiB publisher
        # below would otherwise create it with its own small limit.
        async with started_publisher(quiet):
            pass
        # A real dead letter: a relay whose bus refuses records over 4 KiB.
        await relay_pending(quiet, max_record_bytes=4096)
        [dead] = (await admin.get("/v1/admin/outbox/dead")).json()["dead_letters"]
        assert dead["event"]["seq"] == 2 and dead["recipient"] == b.agent_id

        async with run_workers(quiet):
            await wait_until(lambda: relay_listening(pool), "the relay's LISTEN connection")
            # Another recipient's stream, so b's seq 2 stays the next one push writes.
            await b.send(a.agent_id, "relay is up")      # a: seq 2
            await pushed(redis, a, 2)
            resp = await admin.post(f"/v1/admin/outbox/dead/{dead['id']}/retry")
            assert resp.status_code == 200, resp.text
            event = await pushed(redis, b, 2)
            assert event["task_id"] == big["task_id"] and event["type"] == "task.created"


async def test_effects_run_after_the_commit_and_never_after_a_rollback(
        pool: asyncpg.Pool) -> None:
    seen: list[int] = []

    async def count_users() -> None:  # on another connection: sees only what committed
        seen.append(int(await pool.fetchval("SELECT count(*) FROM users WHERE username = 'uow'")))

    with pytest.raises(RuntimeError):
        async with writes_module.writes(pool) as tx:
            await tx.conn.execute("INSERT INTO users (username, password_hash) VALUES ('uow', 'x')")
            tx.after_commit(count_users)
            raise RuntimeError("rolled back")
    assert seen == []
    async with writes_module.writes(pool) as tx:
        await tx.conn.execute("INSERT INTO users (username, password_hash) VALUES ('uow', 'x')")
        tx.after_commit(count_users)
        assert seen == []
    assert seen == [1]


def test_events_are_appended_only_through_the_unit_of_work() -> None:
    """``events_store.append`` has one caller, app.store.writes: a new code path cannot
    write events without the after-commit wake-up."""
    from pathlib import Path

    root = Path(writes_module.__file__).resolve().parents[2]
    callers = sorted(
        str(path.relative_to(root)) for folder in ("app", "cron", "workers")
        for path in (root / folder).rglob("*.py")
        if "events_store.append(" in path.read_text() or "events.append(" in path.read_text())
    assert callers == ["app/store/writes.py"]
