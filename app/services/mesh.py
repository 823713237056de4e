"""The one context every writing service takes: Postgres, the settings, Redis, and
what a process keeps beside them (the after-commit signal, the caches, the create
batcher). The web lifespan builds it (as app.web.state.State), cron and the workers
build their own; a service reads what it needs from it, so no edge can leave an
extra out and quietly skip a cache or the batcher."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import redis.asyncio as aioredis

from app.delivery.inbox_hub import publish_auth_change
from app.platform.settings import Settings
from app.services.principal_cache import PrincipalCache
from app.services.reach_cache import ReachCache, publish_reach_change
from app.services.task_creates import CreateBatcher
from app.store.writes import Wakeup


@dataclass
class Mesh:
    pool: asyncpg.Pool
    settings: Settings
    redis: aioredis.Redis
    # The process's after-commit signal (app.delivery.after_commit.AfterCommit),
    # handed to every write's unit of work (app.store.writes); None makes each write
    # NOTIFY the relay itself.
    wakeup: Wakeup | None = None
    # The per-process caches of who a token names and who may reach whom, kept
    # right by the notices the web hub hears; None: every request asks Postgres.
    principals: PrincipalCache | None = None
    reach: ReachCache | None = None
    # The writer that puts concurrent task creates in one statement (ADR 028);
    # None: each create is written alone.
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
        web process."""
        if self.reach is not None:  # a deleted agent reaches nobody any more
            self.reach.forget_all()
        if self.principals is not None:
            await self.principals.auth_changed(agent_id)
        else:
            await publish_auth_change(self.redis, agent_id)

    async def reach_changed(self) -> None:
        """Who may reach whom changed (committed): forget it here, tell every web
        process."""
        if self.reach is not None:
            await self.reach.changed()
        else:
            await publish_reach_change(self.redis)
