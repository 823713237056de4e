"""Following Redis channels: a channel wanted while no subscription is up is asked
for by the next one (a reconnect subscribes to what is wanted then), and one
dropped is left; a message on any followed channel reaches the follower. Against
the real Redis."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from app.delivery.redis_follow import Channels, follow
from app.platform.retry import Backoff
from app.platform.settings import Settings


class Heard:
    """What a follower heard: the messages in order, and how often it subscribed."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self.subscriptions = 0
        self._more = asyncio.Event()

    def message(self, data: bytes) -> None:
        self.messages.append(data)
        self._more.set()

    def subscribed(self) -> None:
        self.subscriptions += 1
        self._more.set()

    async def until(self, done: Callable[[], bool]) -> None:
        while not done():
            self._more.clear()
            await self._more.wait()


@contextlib.asynccontextmanager
async def following(settings: Settings, channels: Channels, url: str | None = None
                    ) -> AsyncIterator[tuple[Heard, aioredis.Redis]]:
    """A follower of ``channels`` (on ``url``, the session's Redis by default) and a
    client to publish with, for at most 30 s."""
    heard = Heard()
    redis = aioredis.from_url(settings.redis_url)
    follower = asyncio.create_task(follow(
        url or settings.redis_url, channels, Backoff("test_follow"),
        on_message=heard.message, on_subscribed=heard.subscribed))
    try:
        async with asyncio.timeout(30):
            yield heard, redis
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await redis.aclose()


async def test_wanted_channels_are_followed_from_the_next_subscription_and_dropped(
        migrated: Settings, uniq: str) -> None:
    base, extra = f"follow-{uniq}-base", f"follow-{uniq}-extra"
    channels = Channels(base)
    channels.want(extra)  # before any subscription: the first one asks for it
    async with following(migrated, channels) as (heard, redis):
        await channels.until(base)
        await channels.until(extra)
        await redis.publish(extra, b"on the wanted one")
        await redis.publish(base, b"on the base one")
        await heard.until(lambda: b"on the base one" in heard.messages)
        assert heard.messages == [b"on the wanted one", b"on the base one"]

        channels.want(extra, False)
        await channels.until(extra, live=False)
        await redis.publish(extra, b"nobody hears this")
        await redis.publish(base, b"after the drop")
        await heard.until(lambda: b"after the drop" in heard.messages)
        assert b"nobody hears this" not in heard.messages

        channels.want(base, False)  # always followed: dropping it changes nothing
        channels.want(extra)
        await channels.until(extra)
        assert channels.live(base)


async def test_a_reconnect_asks_for_exactly_what_is_wanted_then(
        migrated: Settings, uniq: str) -> None:
    """``want_exactly`` replaces the wanted set; many waiters of many channels are
    each settled by their own channel's confirmation; a subscription Redis drops is
    made again with what is wanted at that moment."""
    name = f"follow-{uniq}"
    first = {f"{name}-{n}" for n in range(200)}
    channels = Channels(f"{name}-base")
    url = f"{migrated.redis_url}?client_name={name}"
    async with following(migrated, channels, url) as (heard, redis):
        await heard.until(lambda: heard.subscriptions == 1)
        channels.want_exactly(first)
        await asyncio.gather(*(channels.until(c) for c in first))
        assert await redis.pubsub_numsub(*sorted(first)[:3]) == [
            (c.encode(), 1) for c in sorted(first)[:3]]

        later = {f"{name}-{n}" for n in range(150, 250)}
        channels.want_exactly(later)
        await asyncio.gather(*(channels.until(c, live=c in later) for c in first | later))

        [mine] = [c for c in await redis.client_list() if c["name"] == name]
        await redis.client_kill_filter(_id=mine["id"])
        await heard.until(lambda: heard.subscriptions == 2)
        await asyncio.gather(*(channels.until(c) for c in later))
        assert not any(channels.live(c) for c in first - later)
        gone = sorted(first - later)[0]
        assert await redis.pubsub_numsub(gone) == [(gone.encode(), 0)]


async def test_a_channel_dropped_and_wanted_again_is_live_only_when_redis_says_so(
        migrated: Settings, uniq: str) -> None:
    """A reader that comes as the channel's linger ends must not be told the channel
    is live on the strength of the subscription being taken down."""
    base, again = f"follow-{uniq}-base", f"follow-{uniq}-again"
    channels = Channels(base)
    channels.want(again)
    async with following(migrated, channels) as (heard, redis):
        await channels.until(again)
        channels.want(again, False)
        await asyncio.sleep(0)  # the drop is on its way: an UNSUBSCRIBE not yet confirmed
        assert not channels.live(again)
        channels.want(again)
        assert not channels.live(again)
        await channels.until(again)
        await redis.publish(again, b"after the second subscription")
        await heard.until(lambda: b"after the second subscription" in heard.messages)


async def _left_unread(settings: Settings, channel: str) -> None:
    """Messages published while the follower leaves them unread reach it, in order,
    only once it reads again."""
    channels = Channels(channel)
    sent = [b"m%d" % n for n in range(5)]
    async with following(settings, channels) as (heard, redis):
        await channels.until(channel)
        with channels.unread():
            for message in sent:
                await redis.publish(channel, message)
            # Redis writes a subscriber's messages before it reads the next command,
            # so after these round trips every message is in the follower's socket,
            # and a reading follower would have handed them over.
            for _ in range(20):
                await redis.ping()
            assert heard.messages == []
        await heard.until(lambda: len(heard.messages) == len(sent))
        assert heard.messages == sent


async def test_messages_left_unread_arrive_when_reading_resumes(
        migrated: Settings, uniq: str) -> None:
    await _left_unread(migrated, f"follow-{uniq}-unread")


async def test_messages_left_unread_arrive_when_reading_resumes_on_uvloop(
        migrated: Settings, uniq: str) -> None:
    """The worker processes run uvloop, whose transports are not asyncio's classes."""
    uvloop = pytest.importorskip("uvloop")
    await asyncio.to_thread(uvloop.run, _left_unread(migrated, f"follow-{uniq}-uvloop"))
