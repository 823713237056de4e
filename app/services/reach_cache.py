"""Who may reach whom, kept per web process.

The relationship facts a send is decided on (app.domain.permissions,
app.store.social.relationships) change rarely and are read on every task
create. Here they are kept per (sender, recipient) pair until a reach notice
(app.delivery.protocol ``reach_notice``) or a credential notice (an agent deleted)
drops them all — in every web process, through its InboxHub subscription.
Dropping all, not the pair: a friendship also changes what its owners'
virtual users may reach (permissions.speaks_for_own_agents), and reach
changes are rare next to sends. A pair naming a missing agent is not kept (it
may be created later).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.delivery.inbox_hub import publish_cache_change
from app.delivery.protocol import Notice, reach_notice
from app.domain.permissions import Relationship
from app.platform.cache import BoundedCache

log = logging.getLogger("mesh.cache")

# Told, after the commit, that who may reach whom changed (app.services.social).
ReachChanged = Callable[[], Awaitable[None]]


async def publish_reach_change(redis: aioredis.Redis) -> None:
    """Tell every web process to drop its cached relationships. Best effort: a lost
    notice is bounded by the cache's TTL, and a resubscribe drops everything."""
    try:
        await publish_cache_change(redis, reach_notice())
    except (RedisError, OSError) as exc:
        log.warning("could not publish a reach change: %s", exc)


class ReachCache:
    def __init__(self, max_entries: int, ttl: float, *,
                 enabled: Callable[[], bool] | None = None,
                 redis: aioredis.Redis | None = None) -> None:
        kwargs = {} if enabled is None else {"enabled": enabled}
        self._pairs: BoundedCache[tuple[str, str], Relationship] = BoundedCache(
            max_entries, ttl, **kwargs)
        self._redis = redis

    async def relationship(self, sender: str, recipient: str,
                           load: Callable[[], Awaitable[Relationship]]) -> Relationship:
        key = (sender, recipient)
        hit = self._pairs.get(key)
        if hit is not None:
            return hit
        generation = self._pairs.generation()
        rel = await load()
        if rel.both_exist:
            self._pairs.put(key, rel, generation, tag=sender)
        return rel

    def forget_all(self) -> None:
        self._pairs.clear()

    async def changed(self) -> None:
        """After a reach change committed: drop here at once, then tell the others."""
        self.forget_all()
        if self._redis is not None:
            await publish_reach_change(self._redis)

    # --- app.delivery.inbox_hub.NoticeListener ---------------------------------------------

    def notice(self, notice: Notice) -> None:
        if notice.auth or notice.reach:
            self._pairs.clear()

    def reset(self) -> None:
        self._pairs.clear()
