"""Wake-ups for waiting inbox readers (SSE streams and long-polls).

The push worker PUBLISHes a notice (app.delivery) on one Redis channel after it
writes an event to the agent's stream. Each web process holds ONE subscriber
connection and wakes its local waiters for that agent — so thousands of idle
streams cost one Redis connection, not one each, and a long-poll wakes within
milliseconds instead of polling the database.

A notification is only a hint: readers always re-read their source. When the
subscription breaks (Redis restart) every waiter is woken once after
reconnecting, since notifications may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.delivery import NOTIFY_CHANNEL, Notice, auth_notice, parse_notice
from app.retry import Backoff

log = logging.getLogger("mesh.hub")


async def publish_auth_change(redis: aioredis.Redis, agent_id: str) -> None:
    """Tell every web process that an agent's credentials changed (a key revoked,
    the agent deleted): its open streams re-check them now and end if invalid.
    Best effort — open streams also re-check on their own every few minutes."""
    try:
        await redis.publish(NOTIFY_CHANNEL, auth_notice(agent_id))
    except (RedisError, OSError) as exc:
        log.warning("could not publish the credential change of %s: %s", agent_id, exc)


class Waiter:
    """One reader's wake-up flag; set by the hub, cleared by the reader."""

    __slots__ = ("_event", "agent_id", "auth_changed", "on_wake")

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self._event = asyncio.Event()
        self.auth_changed = False
        # A reader that waits on something else too (an SSE stream waits in the
        # client's receive(), app.sse_response) is told here instead of by wait().
        self.on_wake: Callable[[], None] | None = None

    def wake(self, *, auth: bool = False) -> None:
        if auth:
            self.auth_changed = True
        self._event.set()
        if self.on_wake is not None:
            self.on_wake()

    async def wait(self, timeout: float) -> bool:
        """True when woken, False on timeout. Clears the flag either way."""
        # asyncio.timeout, not wait_for: wait_for wraps the wait in a Task of its
        # own on 3.11, which thousands of idle streams would each keep alive.
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._event.clear()


class NoticeListener(Protocol):
    """Something else in the process that follows the notices (a cache to invalidate)."""

    def notice(self, notice: Notice) -> None: ...

    def reset(self) -> None:
        """The subscription was (re)established: notices may have been missed."""


class InboxHub:
    def __init__(self, redis_url: str) -> None:
        self._redis_url = redis_url
        self._waiters: dict[str, set[Waiter]] = defaultdict(set)
        self._listeners: list[NoticeListener] = []
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="inbox-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @contextlib.asynccontextmanager
    async def watch(self, agent_id: str) -> AsyncIterator[Waiter]:
        """Register before reading the source, so no event slips between the
        read and the wait."""
        waiter = Waiter(agent_id)
        self._waiters[agent_id].add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(agent_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[agent_id]

    def add_listener(self, listener: NoticeListener) -> None:
        """Hand every notice to ``listener`` too (called in the hub's task; must not block)."""
        self._listeners.append(listener)

    def watching(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def wake(self, agent_id: str, *, auth: bool = False) -> None:
        """Wake this process's waiters of ``agent_id`` (as a notice does)."""
        for waiter in self._waiters.get(agent_id, ()):
            waiter.wake(auth=auth)

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.wake()

    async def _run(self) -> None:
        backoff = Backoff("inbox_hub", logger=log)
        while True:
            client = aioredis.from_url(self._redis_url, health_check_interval=10)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(NOTIFY_CHANNEL)
                self.connected.set()
                for listener in self._listeners:
                    listener.reset()
                self._wake_all()
                backoff.reset()
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    notice = parse_notice(message["data"])
                    for listener in self._listeners:
                        listener.notice(notice)
                    self.wake(notice.agent_id, auth=notice.auth)
                reason = "Redis ended the subscription"
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                reason = f"lost Redis ({exc})"
            finally:
                self.connected.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                    await client.aclose()
            await backoff.wait(reason)
