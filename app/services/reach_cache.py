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

Misses that meet share one query (app.platform.coalescer): a new web process, or
one whose entries were all dropped, meets every sender-recipient pair at once —
a thousand pairs in its first second under a hundred senders — and one query per
pair there cost the first seconds' sends a p99 twice the steady state's.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.delivery.inbox_hub import publish_cache_change
from app.delivery.protocol import Notice, reach_notice
from app.domain.permissions import Relationship
from app.platform.cache import BoundedCache
from app.platform.coalescer import Coalescer

log = logging.getLogger("mesh.cache")

# Told, after the commit, that who may reach whom changed (app.services.social).
ReachChanged = Callable[[], Awaitable[None]]
# The relationships of (sender, recipient) pairs, in their order: what Postgres says
# (app.store.social.pair_relationships on the web's pool).
LoadPairs = Callable[[list[tuple[str, str]]], Awaitable[list[Relationship]]]

# Misses per query, and queries at once: a slow query does not hold the misses
# behind it, and a cold process's first second is a handful of queries.
_MISSES_PER_QUERY = 128
_QUERIES_IN_FLIGHT = 2


async def publish_reach_change(redis: aioredis.Redis) -> None:
    """Tell every web process to drop its cached relationships. Best effort: a lost
    notice is bounded by the cache's TTL, and a resubscribe drops everything."""
    try:
        await publish_cache_change(redis, reach_notice())
    except (RedisError, OSError) as exc:
        log.warning("could not publish a reach change: %s", exc)


class ReachCache:
    def __init__(self, max_entries: int, ttl: float, load: LoadPairs, *,
                 enabled: Callable[[], bool] | None = None,
                 redis: aioredis.Redis | None = None) -> None:
        kwargs = {} if enabled is None else {"enabled": enabled}
        self._pairs: BoundedCache[tuple[str, str], Relationship] = BoundedCache(
            max_entries, ttl, **kwargs)
        self._misses: Coalescer[tuple[str, str], Relationship] = Coalescer(
            load, max_batch=_MISSES_PER_QUERY, in_flight=_QUERIES_IN_FLIGHT)
        self._redis = redis

    async def relationship(self, sender: str, recipient: str) -> Relationship:
        key = (sender, recipient)
        hit = self._pairs.get(key)
        if hit is not None:
            return hit
        # Taken before the query: a change noticed while it runs, or while it
        # waits for a slot, keeps its answer out of the cache.
        generation = self._pairs.generation()
        rel = await self._misses.submit(key)
        if rel.both_exist:
            self._pairs.put(key, rel, generation, tag=sender)
        return rel

    @property
    def sizes(self) -> deque[int]:
        """The latest miss queries' sizes (pairs each), for tests."""
        return self._misses.sizes

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
