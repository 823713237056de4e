"""Following one Redis pub/sub channel for as long as the process runs.

Both followers of the mesh's hints — the web process's InboxHub (event, commit,
credential and reach notices) and the outbox relay (the web processes' commits,
ADR 029) — hold one subscription that must outlive any Redis restart. Pub/sub
drops what is published while nobody listens, so ``on_subscribed`` runs after
every (re)subscription: the follower treats it as "you may have missed
something" and re-reads its source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.platform.retry import Backoff


async def follow(redis_url: str, channel: str, backoff: Backoff, *,
                 on_message: Callable[[bytes], None],
                 on_subscribed: Callable[[], None],
                 on_lost: Callable[[], None] = lambda: None) -> None:
    """Subscribe to ``channel`` and call ``on_message`` with each message's data;
    resubscribe with ``backoff`` when Redis goes away. Runs until cancelled (or
    until ``backoff``'s stop event is set)."""
    while not backoff.stopping:
        client = aioredis.from_url(redis_url, health_check_interval=10)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(channel)
            on_subscribed()
            backoff.reset()
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    on_message(message["data"])
            reason = "Redis ended the subscription"
        except (RedisError, OSError) as exc:
            reason = f"lost Redis ({exc})"
        finally:
            on_lost()
            with contextlib.suppress(Exception):
                await pubsub.aclose()
                await client.aclose()
        await backoff.wait(reason)
