"""One agent's live inbox stream: events in seq order and keep-alives.

The SSE handler (app.api.sse) only maps what this yields to frames. The loop
here owns the rest: waking on the hub's notices, keep-alive ticks, re-checking
the credentials (on a revocation notice and every ``sse_auth_recheck_seconds``),
re-reading Postgres when no notice came for ``sse_recheck_seconds`` (a notice
lost with Redis delays an event, never loses it), ending at the token's expiry,
and recording receipts for what it handed over.

Time comes from an injectable :class:`Clock`, so the loop is tested with a fake
one (tests/unit/test_inbox_stream.py) instead of sleeping.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import asyncpg
import redis.asyncio as aioredis

from app.event_wire import WireEvent
from app.inbox_hub import InboxHub, Waiter
from app.metrics import SSE_CONNECTIONS
from app.services import accounts, inbox
from app.services.principals import Agent
from app.services.stream import InboxReader
from app.settings import Settings


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float:
        """Unix time, the scale of a token's ``exp``."""
        ...

    async def wait(self, waiter: Waiter, timeout: float) -> bool:
        """Until the waiter is woken (True) or ``timeout`` seconds pass (False)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def wait(self, waiter: Waiter, timeout: float) -> bool:
        return await waiter.wait(timeout)


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Nothing to send for a keep-alive interval; the connection is still good."""


KEEP_ALIVE = KeepAlive()

StreamItem = WireEvent | KeepAlive


class EventSource(Protocol):
    """Where events come from (app.services.stream.InboxReader): strictly in
    seq order, ``[]`` when nothing new is known yet."""

    async def next_batch(self, *, from_postgres: bool = False) -> list[WireEvent]: ...


class InboxStream:
    def __init__(self, source: EventSource, hub: InboxHub, settings: Settings, who: Agent, *,
                 still_valid: Callable[[], Awaitable[bool]],
                 delivered: Callable[[list[WireEvent]], Awaitable[None]],
                 clock: Clock | None = None) -> None:
        self.source = source
        self.hub = hub
        self.settings = settings
        self.who = who
        self.still_valid = still_valid
        self.delivered = delivered
        self.clock: Clock = clock or SystemClock()
        self._stopping = False
        self._waiter: Waiter | None = None

    def stop(self) -> None:
        """End the stream at its next turn (server shutdown); callable from anywhere."""
        self._stopping = True
        if self._waiter is not None:
            self._waiter.wake()

    @classmethod
    async def open(cls, pool: asyncpg.Pool, redis: aioredis.Redis, hub: InboxHub,
                   settings: Settings, who: Agent, after: int | None, *,
                   clock: Clock | None = None) -> InboxStream:
        """Resolve the start (``after``, else the acked cursor; never below the
        floor) before the response starts, so an unknown agent is still a 404."""
        start = await inbox.start_cursor(pool, who.agent_id, after)
        return cls(InboxReader(pool, redis, who.agent_id, start), hub, settings, who,
                   still_valid=functools.partial(accounts.still_valid, pool, who),
                   delivered=functools.partial(inbox.record_delivery, pool, who.agent_id),
                   clock=clock)

    async def items(self, connected: Callable[[], Awaitable[bool]] | None = None,
                    ) -> AsyncIterator[StreamItem]:
        """Events and keep-alives until the token expires or the credentials are
        revoked; the client then reconnects (Last-Event-ID) with a fresh token.

        ``connected`` is asked after every wait, before anything is handed over:
        False (the client is gone) ends the stream, so a dead connection costs
        at most one keep-alive interval and gets no receipts recorded for it."""
        s = self.settings
        clock = self.clock
        # Wake at least every keep-alive interval, and often enough for the re-check.
        tick = min(s.sse_keepalive_seconds, s.sse_recheck_seconds)
        with SSE_CONNECTIONS.track_inprogress():
            async with self.hub.watch(self.who.agent_id) as waiter:
                self._waiter = waiter
                from_postgres = False
                checked_auth_at = read_postgres_at = clock.monotonic()
                while not self._stopping:
                    batch = await self.source.next_batch(from_postgres=from_postgres)
                    from_postgres = False
                    if batch:
                        for ev in batch:
                            yield ev
                        await self.delivered(batch)
                        continue
                    left = tick if self.who.expires_at is None else \
                        self.who.expires_at - clock.time()
                    if left <= 0:
                        return
                    woke = await clock.wait(waiter, min(tick, left))
                    if self._stopping or (connected is not None and not await connected()):
                        break
                    now = clock.monotonic()
                    if not woke:
                        yield KEEP_ALIVE
                    if waiter.auth_changed or now - checked_auth_at > s.sse_auth_recheck_seconds:
                        waiter.auth_changed = False
                        checked_auth_at = now
                        if not await self.still_valid():
                            return
                    if not woke and now - read_postgres_at >= s.sse_recheck_seconds:
                        from_postgres = True
                        read_postgres_at = now
