"""Who a bearer token names, kept per web process.

Authenticating a request used to cost a JWT decode and a Postgres round trip
(is the key still live, does the agent still exist). Here a token that
resolved once maps to its principal until the token expires, the TTL safety
net runs out, or a credential notice (app.delivery.protocol ``"{agent_id} auth"``:
a key revoked, the agent deleted) drops every entry of that agent — in every
web process at once, since each hears the notice on its InboxHub subscription.
Only successes are cached: a refused token always goes to Postgres again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from app.delivery.inbox_hub import publish_auth_change
from app.delivery.protocol import Notice
from app.platform.cache import BoundedCache
from app.services.principals import Agent, Owner


def owner_tag(user_id: int) -> str:
    return f"owner:{user_id}"


class PrincipalCache:
    """Tokens → principals, and which virtual-user agents exist."""

    def __init__(self, max_entries: int, ttl: float, *,
                 enabled: Callable[[], bool] | None = None,
                 redis: aioredis.Redis | None = None) -> None:
        kwargs = {} if enabled is None else {"enabled": enabled}
        self._tokens: BoundedCache[str, Owner | Agent] = BoundedCache(max_entries, ttl, **kwargs)
        self._virtual: BoundedCache[str, bool] = BoundedCache(max_entries, ttl, **kwargs)
        self._redis = redis

    def token(self, token: str) -> Owner | Agent | None:
        who = self._tokens.get(token)
        if who is not None and who.expires_at is not None and time.time() >= who.expires_at:
            return None  # expired: the full check words the 401
        return who

    async def resolve(self, token: str,
                      load: Callable[[], Awaitable[Owner | Agent]]) -> Owner | Agent:
        """The cached principal of ``token``, else ``load()`` (which raises for a
        refused token) and remember it."""
        hit = self.token(token)
        if hit is not None:
            return hit
        generation = self._tokens.generation()
        who = await load()
        tag = who.agent_id if isinstance(who, Agent) else owner_tag(who.user_id)
        left = None if who.expires_at is None else who.expires_at - time.time()
        self._tokens.put(token, who, generation, tag=tag, ttl=left)
        return who

    async def virtual_user_exists(self, agent_id: str,
                                  load: Callable[[], Awaitable[bool]]) -> bool:
        if self._virtual.get(agent_id):
            return True
        generation = self._virtual.generation()
        exists = await load()
        if exists:
            self._virtual.put(agent_id, True, generation, tag=agent_id)
        return exists

    def forget(self, agent_id: str) -> None:
        self._tokens.drop_tag(agent_id)
        self._virtual.drop_tag(agent_id)

    async def auth_changed(self, agent_id: str) -> None:
        """After a credential change committed: forget here at once (a request
        right after on this process must not wait for the notice), then tell
        every web process (app.services.accounts' ``auth_changed``)."""
        self.forget(agent_id)
        if self._redis is not None:
            await publish_auth_change(self._redis, agent_id)

    # --- app.delivery.inbox_hub.NoticeListener ---------------------------------------------

    def notice(self, notice: Notice) -> None:
        if notice.auth:
            self.forget(notice.agent_id)

    def reset(self) -> None:
        self._tokens.clear()
        self._virtual.clear()
