"""The web process's shared state, built once by the lifespan: what every edge
(REST, console, A2A, MCP) reaches through ``state(request)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from starlette.requests import Request

from app.delivery.inbox_hub import InboxHub, publish_auth_change
from app.platform.settings import Settings
from app.services.inbox import ReceiptBatcher
from app.services.inbox_stream import Recheck
from app.services.principal_cache import PrincipalCache
from app.services.reach_cache import ReachCache, publish_reach_change
from app.services.task_creates import CreateBatcher
from app.store.writes import Wakeup


@dataclass
class State:
    settings: Settings
    pool: asyncpg.Pool
    redis: aioredis.Redis
    hub: InboxHub
    ratelimiter: Any = None
    # The after-commit signal of this web process (app.delivery.after_commit.AfterCommit),
    # handed to every write's unit of work (app.store.writes); None makes each write
    # NOTIFY the relay itself.
    wakeup: Wakeup | None = None
    # app.web.auth_throttle.AuthThrottle and app.services.kdf.Kdf.
    auth_throttle: Any = None
    kdf: Any = None
    # app.web.stream_slots.StreamSlots: open SSE streams per agent in this process.
    sse_slots: Any = None
    # The same, per owner, for the console's live-feed streams (ADR 032).
    feed_slots: Any = None
    # The batched receipts (ADR 021).
    receipts: ReceiptBatcher | None = None  # the long-poll passes it to record_delivery
    # The one Postgres re-check timer of this process's SSE streams (ADR 023).
    sse_recheck: Recheck | None = None
    # The per-process caches of who a token names and who may reach whom,
    # kept right by the notices the hub hears; None: every request asks Postgres.
    principals: PrincipalCache | None = None
    reach: ReachCache | None = None
    # The writer that puts concurrent task creates in one statement (ADR 028).
    creates: CreateBatcher | None = None

    # The highest cache epoch this process has seen (app.delivery.protocol.CACHE_EPOCH_KEY).
    cache_epoch: int = 0

    def caches_current(self, epoch: int) -> bool:
        """Whether the caches may be trusted at ``epoch`` (read from Redis with the
        rate-limit bucket). A higher epoch than seen so far means a credential or
        reach change happened, maybe before its notice got here: both caches are
        dropped (the notice, when it comes, drops nothing more), and False."""
        if epoch <= self.cache_epoch:
            return True
        self.cache_epoch = epoch
        if self.principals is not None:
            self.principals.reset()
        if self.reach is not None:
            self.reach.reset()
        return False

    async def auth_changed(self, agent_id: str) -> None:
        """An agent's credentials changed (committed): forget them here, tell every
        web process. The ``auth_changed`` of app.services.accounts."""
        if self.reach is not None:  # a deleted agent reaches nobody any more
            self.reach.forget_all()
        if self.principals is not None:
            await self.principals.auth_changed(agent_id)
        else:
            await publish_auth_change(self.redis, agent_id)

    async def reach_changed(self) -> None:
        """Who may reach whom changed (committed): the ``reach_changed`` of
        app.services.social."""
        if self.reach is not None:
            await self.reach.changed()
        else:
            await publish_reach_change(self.redis)


def state(request: Request) -> State:
    return request.app.state.mesh  # type: ignore[no-any-return]
