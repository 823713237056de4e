"""Following Redis pub/sub channels for as long as the process runs.

The followers of the mesh's hints — the web process's InboxHub (event, commit,
credential and reach notices), the lane workers (webhook, A2A bridge) and the outbox
relay (the web processes' commits, ADR 029) — each hold one subscription that must
outlive any Redis restart. Pub/sub drops what is published while nobody listens, so
``on_subscribed`` runs after every (re)subscription: the follower treats it as "you
may have missed something" and re-reads its source.

A follower may also listen on a channel only while it wants it (:class:`Channels`):
the web process follows the commit notices only while it holds a long-poll, and an
agent's event channel only while it holds a reader of that agent. And it may leave
what arrives unread for a while (:meth:`Channels.unread`): the outbox relay does
while it lingers, when no wake-up can change its claim.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from app.platform.retry import Backoff


class Channels:
    """The channels a follower listens on: ``always`` for as long as it runs, and
    others while it :meth:`want`\\ s them. Wanting and dropping never block: the
    change is sent on the live subscription in the background, and a subscription
    made after a reconnect asks for what is wanted then."""

    def __init__(self, *always: str) -> None:
        self.always = always
        self._wanted: set[str] = set()
        self._pubsub: PubSub | None = None
        self._asked: set[str] = set()  # what the live subscription asked Redis for
        self._applying: asyncio.Task[None] | None = None
        self._live: set[str] = set()  # what Redis confirmed on it
        # Subscribes and unsubscribes sent and not yet confirmed, per channel: a
        # channel dropped and wanted again at once is live only when Redis confirmed
        # the last of them, not on the confirmation of the first subscription.
        self._unconfirmed: dict[str, int] = {}
        # Who waits for a channel's confirmation: one future each, per channel, so a
        # thousand streams opening at once are not each woken by every confirmation.
        self._waiting: dict[str, list[tuple[bool, asyncio.Future[None]]]] = {}

    def want(self, channel: str, wanted: bool = True) -> None:
        """Called on every long-poll: costs nothing when nothing changes."""
        if (channel in self._wanted) == wanted:
            return
        if wanted:
            self._wanted.add(channel)
        else:
            self._wanted.discard(channel)
        self._changed()

    def want_exactly(self, channels: set[str]) -> None:
        """Follow ``channels`` (besides ``always``) and drop every other wanted one."""
        if channels != self._wanted:
            self._wanted = set(channels)
            self._changed()

    @property
    def attached(self) -> bool:
        """Whether a subscription is live: what is wanted now is on its way to Redis."""
        return self._pubsub is not None

    def live(self, channel: str) -> bool:
        """Whether Redis confirmed the subscription to ``channel``, and nothing since:
        every message published on it from then on comes, until it is dropped."""
        return channel in self._live and channel not in self._unconfirmed

    async def until(self, channel: str, live: bool = True) -> None:
        """Wait until :meth:`live` says ``live`` for ``channel``."""
        while self.live(channel) != live:
            waiting = (live, asyncio.get_running_loop().create_future())
            self._waiting.setdefault(channel, []).append(waiting)
            try:
                await waiting[1]
            finally:
                self._forget(channel, waiting)

    def _forget(self, channel: str, waiting: tuple[bool, asyncio.Future[None]]) -> None:
        others = self._waiting.get(channel)
        if others is not None and waiting in others:
            others.remove(waiting)
            if not others:
                del self._waiting[channel]

    def _settle(self, channel: str) -> None:
        now = self.live(channel)
        for live, future in self._waiting.get(channel, ()):
            if live == now and not future.done():
                future.set_result(None)

    def confirmed(self, channel: bytes | str, subscribed: bool) -> None:
        name = channel.decode() if isinstance(channel, bytes) else channel
        left = self._unconfirmed.get(name, 0) - 1
        if left > 0:
            self._unconfirmed[name] = left
        else:
            self._unconfirmed.pop(name, None)
        if subscribed:
            self._live.add(name)
        else:
            self._live.discard(name)
        self._settle(name)

    def _sent(self, channels: set[str]) -> None:
        for channel in channels:
            self._unconfirmed[channel] = self._unconfirmed.get(channel, 0) + 1

    async def attach(self, pubsub: PubSub) -> None:
        """Subscribe a new connection to what is wanted now."""
        self._asked = {*self.always, *self._wanted}
        self._sent(self._asked)
        await pubsub.subscribe(*self._asked)
        self._pubsub = pubsub
        self._changed()  # wanted or dropped meanwhile

    def detach(self) -> None:
        self._pubsub = None
        self._asked = set()
        self._live = set()
        self._unconfirmed = {}
        for channel in list(self._waiting):
            self._settle(channel)
        if self._applying is not None:
            self._applying.cancel()
            self._applying = None

    @contextlib.contextmanager
    def unread(self) -> Iterator[None]:
        """Leave what arrives on the live subscription in the socket meanwhile, to be
        read all at once afterwards: a follower with nothing to do about a message
        for a while is then not woken by each. Nothing is lost; without a live
        subscription (or a transport that cannot pause) this does nothing."""
        writer = getattr(self._pubsub.connection, "_writer", None) if self._pubsub else None
        transport = getattr(writer, "transport", None)
        # Duck-typed: uvloop's transports pause as asyncio's do but are not its classes.
        if not hasattr(transport, "pause_reading") or transport.is_closing():
            yield
            return
        transport.pause_reading()
        try:
            yield
        finally:
            if not transport.is_closing():
                transport.resume_reading()

    def _changed(self) -> None:
        if self._pubsub is not None and (self._applying is None or self._applying.done()):
            self._applying = asyncio.create_task(self._apply(self._pubsub))

    async def _apply(self, pubsub: PubSub) -> None:
        # A failed send leaves the connection to the follow loop, which reconnects
        # and subscribes anew to what is wanted then.
        with contextlib.suppress(RedisError, OSError):
            while pubsub is self._pubsub:
                add = self._wanted - self._asked
                remove = self._asked - self._wanted - set(self.always)
                if not add and not remove:
                    return
                self._asked = (self._asked | add) - remove
                self._sent(add | remove)
                if add:
                    await pubsub.subscribe(*add)
                if remove:
                    await pubsub.unsubscribe(*remove)


async def follow(redis_url: str, channels: str | Channels, backoff: Backoff, *,
                 on_message: Callable[[bytes], None],
                 on_subscribed: Callable[[], None],
                 on_lost: Callable[[], None] = lambda: None) -> None:
    """Subscribe to ``channels`` and call ``on_message`` with each message's data,
    whichever channel it came on; resubscribe with ``backoff`` when Redis goes away.
    Runs until cancelled (or until ``backoff``'s stop event is set)."""
    listen_on = channels if isinstance(channels, Channels) else Channels(channels)
    while not backoff.stopping:
        client = aioredis.from_url(redis_url, health_check_interval=10)
        pubsub = client.pubsub()
        try:
            await listen_on.attach(pubsub)
            on_subscribed()
            backoff.reset()
            async for message in pubsub.listen():
                kind = message.get("type")
                if kind == "message":
                    on_message(message["data"])
                elif kind in ("subscribe", "unsubscribe"):
                    listen_on.confirmed(message["channel"], kind == "subscribe")
            reason = "Redis ended the subscription"
        except (RedisError, OSError) as exc:
            reason = f"lost Redis ({exc})"
        finally:
            listen_on.detach()
            on_lost()
            with contextlib.suppress(Exception):
                await pubsub.aclose()
                await client.aclose()
        await backoff.wait(reason)
