"""A web process follows an agent's event notices only while it holds a reader of
that agent (ADR 063): the push worker publishes on the agent's own channel, the hub
subscribes to it before a waiter is handed out (so nothing published after the
reader's first read is missed), and drops it a while after the last waiter left.
Against the real Redis and the real push worker's write."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import redis.asyncio as aioredis

from app.delivery.inbox_hub import LONG_POLL, STREAM, InboxHub
from app.delivery.protocol import inbox_channel, inbox_stream_key
from app.domain.event_wire import WireEvent, encode_event
from app.platform.settings import Settings
from workers.push import Push, PushEvent


def _event(seq: int, uniq: str) -> WireEvent:
    data = encode_event({"seq": seq, "event_id": f"e{seq}-{uniq}", "type": "task.message",
                         "task_id": None, "context_id": None, "from_agent_id": None,
                         "created_at": datetime.now(UTC), "payload": {"n": seq}})
    return WireEvent(seq, "task.message", data)


async def _followers(redis: aioredis.Redis, channel: str) -> int:
    [(_, count)] = await redis.pubsub_numsub(channel)
    return int(count)


async def test_the_hub_follows_an_agents_channel_while_it_holds_its_reader(
        migrated: Settings, uniq: str) -> None:
    agent = f"ag_{uniq}"
    channel = inbox_channel(agent)
    hub = InboxHub(migrated.redis_url)
    hub.LINGER_SECONDS = 0.0
    redis = aioredis.from_url(migrated.redis_url)
    push = Push(migrated, redis, subscriber=None)  # type: ignore[arg-type]
    await hub.start()
    try:
        async with asyncio.timeout(30):
            await hub.connected.wait()
            assert await _followers(redis, channel) == 0

            async with hub.watch(agent, STREAM, takes_offers=True) as stream:
                # Handed out only once Redis confirmed the channel.
                assert hub.channels.live(channel)
                assert await _followers(redis, channel) == 1
                event = _event(1, uniq)
                await push.write([PushEvent(agent, event)])
                assert await stream.wait(30)
                assert stream.take_offered() == [event]

            await hub.channels.until(channel, live=False)
            assert await _followers(redis, channel) == 0
    finally:
        await hub.stop()
        await redis.delete(inbox_stream_key(agent))
        await redis.aclose()


async def test_a_client_polling_in_a_loop_keeps_the_channel(
        migrated: Settings, uniq: str) -> None:
    agent = f"ag_{uniq}"
    channel = inbox_channel(agent)
    hub = InboxHub(migrated.redis_url)  # the default linger: a minute
    redis = aioredis.from_url(migrated.redis_url)
    await hub.start()
    try:
        async with asyncio.timeout(30):
            await hub.connected.wait()
            for _ in range(3):
                async with hub.watch(agent, LONG_POLL):
                    assert hub.channels.live(channel)
                assert hub.channels.live(channel)  # left, still followed
            assert await _followers(redis, channel) == 1
    finally:
        await hub.stop()
        await redis.aclose()
