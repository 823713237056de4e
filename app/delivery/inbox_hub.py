"""Wake-ups for waiting inbox readers (SSE streams and long-polls).

The push worker PUBLISHes an event notice (app.delivery.protocol) on the agent's
own Redis channel after it writes an event to the agent's stream, with the event
when it is small. A long-poll reads Postgres, so it need not wait for the relay and
the push worker: the web process that committed an event also publishes a commit
notice on the agent's own commit channel (app.delivery.after_commit, driven by
app.store.writes), which wakes only the waiters of kind ``LONG_POLL`` — a stream
waiter woken by it would find its Redis stream still without the event.

Each web process holds ONE subscriber connection — so thousands of idle streams
cost one Redis connection, not one each — on which it follows, for every agent it
holds a waiter of, that agent's event channel, and its commit channel while one of
the waiters is a long-poll. A send therefore wakes only the processes that hold a
reader of its recipient, and a process serving streams alone never hears commits.
A waiter is handed out once Redis has confirmed its channels (the first waiter of
an agent on a process pays that round trip), so no notice slips between the
reader's first read and its wait. A channel is dropped a while after the last
waiter that needed it left, so a client polling in a loop keeps it.

A notification is only a hint: a reader re-reads its source unless the events
every notice since its last read carried continue it exactly. When the
subscription breaks (Redis restart) every waiter is woken once after
reconnecting, since notifications may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Literal, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.delivery.protocol import (
    CACHE_EPOCH_KEY,
    NOTIFY_CHANNEL,
    Notice,
    auth_notice,
    carried_events,
    commit_channel,
    inbox_channel,
    parse_notice,
)
from app.delivery.redis_follow import Channels, follow
from app.domain.event_wire import WireEvent
from app.platform.background import cancel
from app.platform.retry import Backoff

log = logging.getLogger("mesh.hub")


async def publish_auth_change(redis: aioredis.Redis, agent_id: str) -> None:
    """Tell every web process that an agent's credentials changed (a key revoked,
    the agent deleted): its open streams re-check them now and end if invalid.
    Best effort — open streams also re-check on their own every few minutes."""
    try:
        await publish_cache_change(redis, auth_notice(agent_id))
    except (RedisError, OSError) as exc:
        log.warning("could not publish the credential change of %s: %s", agent_id, exc)


async def publish_cache_change(redis: aioredis.Redis, notice: str) -> None:
    """Move the cache epoch, then publish ``notice``: one round trip, in that order
    (see app.delivery.protocol.CACHE_EPOCH_KEY)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.incr(CACHE_EPOCH_KEY)
        pipe.publish(NOTIFY_CHANNEL, notice)
        await pipe.execute()


# What a waiter reads: Postgres (woken by commit notices too) or the Redis stream.
WaiterKind = Literal["long-poll", "stream"]
LONG_POLL: WaiterKind = "long-poll"
STREAM: WaiterKind = "stream"


# The most carried event bytes a waiter keeps between two reads of its stream; a
# stream that falls further behind (a client slow to take what it is sent) reads
# its source instead.
OFFER_MAX_BYTES = 64 * 1024


class Waiter:
    """One reader's wake-up flag; set by the hub, cleared by the reader. A stream's
    waiter also keeps the events the notices since its last read carried
    (:meth:`take_offered`)."""

    __slots__ = ("_announced", "_event", "_must_read", "_offered", "_offered_bytes", "_woken",
                 "agent_id", "auth_changed", "kind", "on_wake", "takes_offers")

    def __init__(self, agent_id: str, kind: WaiterKind = STREAM, *,
                 takes_offers: bool = False) -> None:
        self.agent_id = agent_id
        self.kind = kind
        # Only a reader that calls take_offered is handed carried events.
        self.takes_offers = takes_offers
        # Made by the first wait(): an SSE stream never calls it (it waits in the
        # client's receive() and hears on_wake), and ten thousand idle streams
        # would each hold an unused asyncio.Event (~1 KB).
        self._event: asyncio.Event | None = None
        self._woken = False
        self._offered: list[WireEvent] | None = None
        self._offered_bytes = 0
        self._must_read = False
        self._announced = 0
        self.auth_changed = False
        # A reader that waits on something else too (an SSE stream waits in the
        # client's receive(), app.web.sse_response) is told here instead of by wait().
        self.on_wake: Callable[[], None] | None = None

    def wake(self, *, auth: bool = False, events: list[WireEvent] | None = None,
             seq: int = 0) -> None:
        """Wake the reader; ``events`` are what the notice carried (None: it carried
        nothing the reader can use, so the reader must read its source), ``seq``
        the last seq it announced (0: none)."""
        if auth:
            self.auth_changed = True
        self._announced = max(self._announced, seq)
        self._offer(events)
        self._woken = True
        if self._event is not None:
            self._event.set()
        if self.on_wake is not None:
            self.on_wake()

    def _offer(self, events: list[WireEvent] | None) -> None:
        if not self._must_read and events is not None:
            self._offered_bytes += sum(len(ev.data) for ev in events)
            if self._offered_bytes <= OFFER_MAX_BYTES:
                if self._offered is None:
                    self._offered = list(events)
                else:
                    self._offered.extend(events)
                return
        self._must_read = True  # nothing carried, or more than a waiter keeps
        self._offered = None

    def take_offered(self) -> list[WireEvent] | None:
        """The events carried by every notice since the last call, in arrival order;
        None when any wake-up since then carried none (or there was none): then
        only the source says what is new."""
        offered = None if self._must_read else self._offered
        self._offered = None
        self._offered_bytes = 0
        self._must_read = False
        return offered

    def take_announced(self) -> int:
        """The highest seq the notices since the last call announced (0: none)."""
        announced, self._announced = self._announced, 0
        return announced

    def take_woken(self) -> bool:
        """Whether it was woken since the last wait, clearing the flag."""
        woken, self._woken = self._woken, False
        return woken

    async def wait(self, timeout: float) -> bool:
        """True when woken (also before the call), False on timeout. Clears the
        flag either way."""
        if self.take_woken():
            return True
        if self._event is None:
            self._event = asyncio.Event()
        # asyncio.timeout, not wait_for: wait_for wraps the wait in a Task of its
        # own on 3.11, which thousands of idle streams would each keep alive.
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._woken = False
            self._event.clear()


class NoticeListener(Protocol):
    """Something else in the process that follows the notices (a cache to invalidate)."""

    def notice(self, notice: Notice) -> None: ...

    def reset(self) -> None:
        """The subscription was (re)established: notices may have been missed."""


class InboxHub:
    # How long an agent's channels are followed after the last waiter that needed
    # them left: long enough that a client polling in a loop keeps the subscription.
    LINGER_SECONDS = 60.0
    # The longest a new waiter waits for Redis to confirm its agent's channel. Past
    # it the waiter goes on: a subscription that fails is remade by the follow loop,
    # which then wakes every waiter.
    SUBSCRIBE_WAIT_SECONDS = 5.0

    def __init__(self, redis_url: str) -> None:
        self._redis_url = redis_url
        self._waiters: dict[str, set[Waiter]] = defaultdict(set)
        self._listeners: list[NoticeListener] = []
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.channels = Channels(NOTIFY_CHANNEL)
        # A channel no waiter needs any more, and when it will be dropped.
        self._channels_off: dict[str, asyncio.TimerHandle] = {}

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="inbox-hub")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None
        for timer in self._channels_off.values():
            timer.cancel()
        self._channels_off.clear()

    @contextlib.asynccontextmanager
    async def watch(self, agent_id: str, kind: WaiterKind = STREAM, *,
                    takes_offers: bool = False) -> AsyncIterator[Waiter]:
        """Register before reading the source, so no event slips between the
        read and the wait. A stream reader that takes the events notices carry
        (:meth:`Waiter.take_offered`) says so with ``takes_offers``."""
        waiter = Waiter(agent_id, kind, takes_offers=takes_offers)
        self._waiters[agent_id].add(waiter)
        try:
            await self._follow(self._channels_for(agent_id, kind))
            yield waiter
        finally:
            waiters = self._waiters.get(agent_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[agent_id]
                still = self._channels_for_all(waiters or ())
                for channel in self._channels_for(agent_id, kind) - still:
                    self._drop_later(channel)

    @staticmethod
    def _channels_for(agent_id: str, kind: WaiterKind) -> set[str]:
        """What a waiter needs: its agent's event notices, and a long-poll (a reader
        of Postgres) its commit notices too."""
        if kind == LONG_POLL:
            return {inbox_channel(agent_id), commit_channel(agent_id)}
        return {inbox_channel(agent_id)}

    def _channels_for_all(self, waiters: Iterable[Waiter]) -> set[str]:
        return {c for w in waiters for c in self._channels_for(w.agent_id, w.kind)}

    async def _follow(self, channels: set[str]) -> None:
        for channel in channels:
            off = self._channels_off.pop(channel, None)
            if off is not None:
                off.cancel()
            self.channels.want(channel)
        # Without a live subscription there is nothing to wait for: the next one
        # subscribes to every wanted channel and then wakes every waiter.
        pending = [c for c in channels if not self.channels.live(c)]
        if pending and self.channels.attached:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.SUBSCRIBE_WAIT_SECONDS):
                    for channel in pending:
                        await self.channels.until(channel)

    def _drop_later(self, channel: str) -> None:
        old = self._channels_off.pop(channel, None)
        if old is not None:
            old.cancel()
        self._channels_off[channel] = asyncio.get_running_loop().call_later(
            self.LINGER_SECONDS, self._drop, channel)

    def _drop(self, channel: str) -> None:
        del self._channels_off[channel]
        self.channels.want(channel, False)

    def add_listener(self, listener: NoticeListener) -> None:
        """Hand every notice to ``listener`` too (called in the hub's task; must not block)."""
        self._listeners.append(listener)

    def watching(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def wake(self, agent_id: str, *, auth: bool = False, committed: bool = False,
             carried: bytes = b"", seq: int = 0) -> None:
        """Wake this process's waiters of ``agent_id`` (as a notice does); a commit
        notice wakes only the long-polls. The events an event notice ``carried`` are
        read here only for an agent with a waiter, and go to the stream readers that
        take them; ``seq`` is the last seq it announced."""
        waiters = self._waiters.get(agent_id)
        if not waiters:
            return
        takers = bool(carried) and any(w.takes_offers for w in waiters)
        events = carried_events(carried) if takers else None
        for waiter in waiters:
            if committed and waiter.kind != LONG_POLL:
                continue
            waiter.wake(auth=auth, events=events if waiter.takes_offers else None, seq=seq)

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.wake()

    async def _run(self) -> None:
        await follow(self._redis_url, self.channels, Backoff("inbox_hub", logger=log),
                     on_message=self._notice, on_subscribed=self._subscribed,
                     on_lost=self.connected.clear)

    def _subscribed(self) -> None:
        self.connected.set()
        for listener in self._listeners:
            listener.reset()
        self._wake_all()

    def _notice(self, data: bytes) -> None:
        notice = parse_notice(data)
        for listener in self._listeners:
            listener.notice(notice)
        self.wake(notice.agent_id, auth=notice.auth, committed=notice.committed,
                  carried=notice.carried, seq=notice.seq)
