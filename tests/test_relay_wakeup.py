"""The relay hears a web process's commits on Redis (ADR 029).

A send costs the web one Redis pipeline after its commit — the commit notices and
the relays' wake-up together — instead of that and a NOTIFY round trip on
Postgres. Real web (in this loop), real relay built as the ``outbox`` process
builds it, real Postgres and Redis; the relay's sweep is an hour away, so only a
wake-up can relay anything.
"""

from __future__ import annotations

import asyncio

import asyncpg
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from app.delivery.after_commit import AfterCommit
from app.platform.db import create_pool
from app.platform.settings import Settings
from app.store.events import (
    WAKEUP_CHANNEL,
    relay_wakeup_channel,
    relay_wakeup_events,
    relay_wakeup_message,
)
from devstack.process import free_port
from tests.support.isolated import isolated_settings, outbox_counts, wait_until
from tests.support.meshapi import MeshFactory
from tests.support.pipeline import run_relay
from tests.support.servers import serve_app


def _wakeups_sent(via: str) -> float:
    return REGISTRY.get_sample_value("agent_mesh_relay_wakeups_total", {"via": via}) or 0.0


async def test_a_send_wakes_the_relay_over_redis_without_a_notify(migrated: Settings) -> None:
    settings = await isolated_settings(migrated, relay_sweep_seconds=3600.0)
    pool = await create_pool(settings, min_size=1, max_size=2)
    try:
        async with serve_app(settings) as url, MeshFactory.connect(url) as mesh:
            a, b = await mesh.pair()
            redis = aioredis.from_url(settings.redis_url)
            channel = relay_wakeup_channel(settings.bus_topic)
            async with run_relay(settings):
                await wait_until(lambda: _subscribers(redis, channel), "the relay subscribed")
                notifies, by_redis = _wakeups_sent("notify"), _wakeups_sent("redis")
                for i in range(3):
                    await a.send(b.agent_id, f"hello {i}")
                    await wait_until(lambda: _all_sent(pool), "the send relayed", timeout=20)
                assert _wakeups_sent("notify") == notifies  # no NOTIFY: Redis woke the relay
                assert _wakeups_sent("redis") >= by_redis + 3
            await redis.aclose()
    finally:
        await pool.close()


async def _subscribers(redis: aioredis.Redis, channel: str) -> int:
    [(_, n)] = await redis.pubsub_numsub(channel)
    return int(n)


async def _all_sent(pool: asyncpg.Pool) -> bool:
    counts = await outbox_counts(pool)
    return counts["pending"] == 0 and counts["sent"] > 0


async def test_a_commit_whose_redis_round_fails_wakes_the_relay_by_notify(
        migrated: Settings) -> None:
    """The rows are committed whatever Redis does: when the notices' round cannot
    be published, the wake-up falls back to Postgres's NOTIFY at once."""
    settings = await isolated_settings(migrated)
    pool = await create_pool(settings, min_size=1, max_size=2)
    listener = await asyncpg.connect(settings.database_url)
    heard = asyncio.Event()
    await listener.add_listener(WAKEUP_CHANNEL, lambda *_a: heard.set())
    nowhere = aioredis.from_url(f"redis://127.0.0.1:{free_port()}", socket_connect_timeout=1)
    wakeup = AfterCommit(pool, nowhere, relay_channel=relay_wakeup_channel(settings.bus_topic))
    await wakeup.start()
    try:
        wakeup.wake(["someone@somewhere"])
        async with asyncio.timeout(20):
            await heard.wait()
    finally:
        await wakeup.stop()
        await nowhere.aclose()
        await listener.close()
        await pool.close()


async def test_the_wake_up_announces_how_many_events_its_round_carries(
        migrated: Settings) -> None:
    """The relay lingers differently for a lone send than for a round of many
    (ADR 060), so the wake-up's body counts the recipients of the round's commits."""
    settings = await isolated_settings(migrated)
    pool = await create_pool(settings, min_size=1, max_size=2)
    redis = aioredis.from_url(settings.redis_url)
    channel = relay_wakeup_channel(settings.bus_topic)
    wakeup = AfterCommit(pool, redis, relay_channel=channel)
    async with redis.pubsub() as sub:
        await sub.subscribe(channel)
        await sub.get_message(timeout=5)  # the subscription's confirmation
        await wakeup.start()
        try:
            wakeup.wake(["a@x", "b@x"])  # two commits before the round runs: one round
            wakeup.wake(["c@x"])
            message = await sub.get_message(ignore_subscribe_messages=True, timeout=20)
            assert message is not None and message["data"] == relay_wakeup_message(3)
            assert relay_wakeup_events(message["data"]) == 3
        finally:
            await wakeup.stop()
    await redis.aclose()
    await pool.close()


def test_a_wake_up_without_a_count_announces_one_event() -> None:
    assert relay_wakeup_events(b"") == 1  # a NOTIFY's empty payload, or no count sent
    assert relay_wakeup_events("") == 1
    assert relay_wakeup_events(b"7") == 7
    assert relay_wakeup_events(b"0") == 1
    assert relay_wakeup_events(b"lots") == 1
