"""One agent's live inbox stream: events in seq order and keep-alives.

The SSE handler (app.api.sse) only maps what this yields to frames. The loop
here owns the rest: waking on the hub's notices, keep-alive ticks, re-checking
the credentials (on a revocation notice and every ``sse_auth_recheck_seconds``),
re-reading Postgres when it is behind (a notice lost with Redis delays an
event, never loses it), ending at the token's expiry, at server shutdown or
when the client is gone, and recording receipts for what it handed over.

The Postgres re-check is ONE timer per web process (:class:`Recheck`): every
``sse_recheck_seconds`` one statement reads the newest seq of every agent with
an open stream, and only the streams behind it re-read Postgres — not one
query per stream per interval (ADR 023).

Time comes from an injectable :class:`Clock`, so the loop is tested with a fake
one (tests/unit/app/services/test_inbox_stream.py) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import asyncpg
import redis.asyncio as aioredis

from app.delivery.inbox_hub import InboxHub, Waiter
from app.domain.event_wire import WireEvent
from app.platform.metrics import SSE_CONNECTIONS
from app.platform.settings import Settings
from app.platform.unavailable import UNAVAILABLE, is_unavailable
from app.services import accounts, inbox
from app.services.principals import Agent
from app.services.stream import InboxReader
from app.store import inbox as inbox_store

log = logging.getLogger("mesh.sse")


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


class Connection(Protocol):
    """The client's end of a stream (app.web.sse_response.Client)."""

    async def wait(self, waiter: Waiter, timeout: float) -> bool | None:
        """As :meth:`Clock.wait`, and None as soon as the client has left."""
        ...


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Nothing to send for a keep-alive interval; the connection is still good."""


KEEP_ALIVE = KeepAlive()

StreamItem = WireEvent | KeepAlive


class EventSource(Protocol):
    """Where events come from (app.services.stream.InboxReader): strictly in
    seq order, ``[]`` when nothing new is known yet; ``last`` is the seq handed
    over last, ``more`` whether the last read may have left events to read now
    (else the next ones are announced by a notice)."""

    last: int
    more: bool

    async def next_batch(self, *, from_postgres: bool = False,
                         offered: list[WireEvent] | None = None) -> list[WireEvent]: ...


class InboxStream:
    __slots__ = ("_reread", "_stopping", "_waiter", "clock", "delivered", "hub", "recheck",
                 "settings", "source", "still_valid", "who")

    def __init__(self, source: EventSource, hub: InboxHub, settings: Settings, who: Agent, *,
                 still_valid: Callable[[], Awaitable[bool]],
                 delivered: Callable[[list[WireEvent]], Awaitable[None]],
                 recheck: Recheck | None = None, clock: Clock | None = None) -> None:
        self.source = source
        self.hub = hub
        self.settings = settings
        self.who = who
        self.still_valid = still_valid
        self.delivered = delivered
        if recheck is None and isinstance(source, InboxReader):
            # Every stream on Postgres has a re-check: the process's (the State's,
            # passed by the SSE route and the console feed), else one of its own.
            recheck = Recheck(source.pool, settings.sse_recheck_seconds)
        self.recheck = recheck
        self.clock: Clock = clock or SystemClock()
        self._stopping = False
        self._reread = False
        self._waiter: Waiter | None = None

    def stop(self) -> None:
        """End the stream at its next turn (server shutdown)."""
        self._stopping = True
        if self._waiter is not None:
            self._waiter.wake()

    def reread_postgres(self) -> None:
        """Postgres has events past ``source.last``: read them there at the next turn."""
        self._reread = True
        if self._waiter is not None:
            self._waiter.wake()

    @classmethod
    async def open(cls, pool: asyncpg.Pool, redis: aioredis.Redis, hub: InboxHub,
                   settings: Settings, who: Agent, after: int | None, *,
                   receipts: asyncpg.Pool | inbox.ReceiptBatcher | None = None,
                   recheck: Recheck | None = None,
                   clock: Clock | None = None) -> InboxStream:
        """Resolve the start (``after``, else the acked cursor; never below the
        floor) before the response starts, so an unknown agent is still a 404.
        Hand-overs are marked through ``receipts`` (the process's batcher), else
        directly on ``pool``."""
        start = await inbox.start_cursor(pool, who.agent_id, after)
        return cls(InboxReader(pool, redis, who.agent_id, start), hub, settings, who,
                   still_valid=functools.partial(accounts.still_valid, pool, who),
                   delivered=functools.partial(inbox.record_delivery, receipts or pool,
                                                        who.agent_id),
                   recheck=recheck, clock=clock)

    async def items(self, client: Connection | None = None,
                    ) -> AsyncGenerator[StreamItem, None]:
        """Events and keep-alives until the token expires or the credentials are
        revoked; the client then reconnects (Last-Event-ID) with a fresh token.

        With a ``client`` the waits are its (they also end when it leaves, which
        ends the stream at once); without one, the clock's. Postgres going away
        ends the stream too: the client resumes with Last-Event-ID and meets a
        503 + Retry-After until it is back."""
        s = self.settings
        clock = self.clock
        with SSE_CONNECTIONS.track_inprogress():
            async with self.hub.watch(self.who.agent_id, takes_offers=True) as waiter:
                self._waiter = waiter
                if self.recheck is not None:
                    self.recheck.add(self)
                try:
                    checked_auth_at = clock.monotonic()
                    read = True
                    while not self._stopping:
                        if read:
                            from_postgres, self._reread = self._reread, False
                            batch = await self.source.next_batch(
                                from_postgres=from_postgres, offered=waiter.take_offered(),
                                announced=waiter.take_announced())
                            if batch:
                                for ev in batch:
                                    yield ev
                                await self.delivered(batch)
                                if self.source.more:
                                    continue
                                # Drained: a notice that came during the read or the
                                # hand-over has woken the waiter, so the wait below
                                # returns at once; otherwise nothing is there to read.
                        tick = s.sse_keepalive_seconds
                        left = tick if self.who.expires_at is None else \
                            self.who.expires_at - clock.time()
                        if left <= 0:
                            return
                        wait = clock.wait if client is None else client.wait
                        woke = await wait(waiter, min(tick, left))
                        if woke is None or self._stopping:  # the client left, or shutdown
                            return
                        # A tick alone brings nothing to read: a notice that was
                        # lost is the re-check timer's (Recheck), not every idle
                        # stream's Redis read every keep-alive.
                        read = woke
                        now = clock.monotonic()
                        if not woke:
                            yield KEEP_ALIVE
                        if waiter.auth_changed or \
                                now - checked_auth_at > s.sse_auth_recheck_seconds:
                            waiter.auth_changed = False
                            checked_auth_at = now
                            if not await self.still_valid():
                                return
                except UNAVAILABLE as exc:
                    if not is_unavailable(exc):
                        raise
                    log.info("inbox stream ended: the database is unavailable (%s)", exc)
                finally:
                    if self.recheck is not None:
                        self.recheck.discard(self)
                    self._waiter = None


class Recheck:
    """The Postgres re-check of every open stream of one pool (one per process:
    the State holds it).

    Notices are hints (Redis pub/sub loses them in a restart, and the push
    worker may lag), so an idle stream must look at Postgres now and then. One
    task does it for all: every ``interval`` one statement reads the newest seq
    of each agent with an open stream, and the streams behind it re-read
    Postgres. The task runs while streams are open and is cancelled with the last.
    """

    def __init__(self, pool: asyncpg.Pool | None, interval: float, *,
                 newest: Callable[[list[str]], Awaitable[dict[str, int]]] | None = None) -> None:
        self.interval = interval
        self._newest = newest or functools.partial(inbox_store.newest_seqs, pool)
        self._streams: set[InboxStream] = set()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0

    def add(self, stream: InboxStream) -> None:
        self._streams.add(stream)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="sse-postgres-recheck")

    def discard(self, stream: InboxStream) -> None:
        self._streams.discard(stream)
        if not self._streams:  # no timer without streams; the next one starts it again
            if self._task is not None:
                self._task.cancel()
                self._task = None

    async def check(self) -> None:
        """One round: wake the streams that Postgres is ahead of."""
        streams = list(self._streams)
        newest = await self._newest(sorted({st.who.agent_id for st in streams}))
        self.rounds += 1
        for st in streams:
            if newest.get(st.who.agent_id, 0) > st.source.last:
                st.reread_postgres()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except Exception as exc:  # the timer of every stream must outlive one bad round
                if isinstance(exc, UNAVAILABLE) and is_unavailable(exc):
                    log.warning("SSE re-check skipped: the database is unavailable (%s)", exc)
                else:
                    log.exception("SSE re-check failed; trying again in %.0f s", self.interval)
