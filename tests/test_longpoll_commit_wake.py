"""Long-polls wake from the commit, on every web process (ADR 021).

Two real web processes on a database of their own, with NO relay and NO push
worker: nothing writes the agents' Redis streams, so the only things that can
wake a long-poll parked on process B for a send made on process A are the
notices A publishes after its commit (the commit notice, and the event notice
carrying the event for open streams, ADR 065).
"""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
import redis.asyncio as aioredis

from app.delivery.after_commit import AfterCommit
from app.delivery.inbox_hub import LONG_POLL, STREAM, InboxHub
from app.delivery.protocol import (
    NOTIFY_CHANNEL,
    Notice,
    commit_channel,
    commit_notice,
    event_notice,
    inbox_channel,
    parse_notice,
)
from app.platform.db import create_pool
from app.platform.settings import Settings
from app.store.writes import NewEvent, writes
from devstack.process import free_port
from tests.support.meshapi import MeshFactory
from tests.support.procs import MeshProcess


async def _metric(http: httpx.AsyncClient, name: str) -> float:
    for line in (await http.get("/metrics")).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _until_parked(http: httpx.AsyncClient, base: float) -> None:
    async with asyncio.timeout(20):
        while await _metric(http, "agent_mesh_longpoll_waiting") <= base:  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # a gauge has no event to await


async def test_long_poll_on_another_process_answers_from_the_commit_notice(
        quiet_webs: list[MeshProcess], iso: Settings) -> None:
    web_a, web_b = quiet_webs
    redis = aioredis.from_url(iso.redis_url)
    pubsub = redis.pubsub()
    try:
        async with MeshFactory.connect(web_a.url) as mesh, \
                httpx.AsyncClient(base_url=web_b.url, timeout=40) as http_b:
            a, b_on_a = await mesh.pair()
            b = dataclasses.replace(b_on_a, http=http_b)
            await pubsub.subscribe(commit_channel(b.agent_id), inbox_channel(b.agent_id))
            confirmed = 0
            async with asyncio.timeout(10):
                while confirmed < 2:  # Redis took both before anything is sent
                    message = await pubsub.get_message(timeout=1.0)
                    confirmed += message is not None and message["type"] == "subscribe"
            pubsub.ignore_subscribe_messages = True
            after = (await b.inbox())["next_after"]
            base = await _metric(http_b, "agent_mesh_longpoll_waiting")
            poll = asyncio.create_task(b.inbox(after=after, wait=25))
            await _until_parked(http_b, base)

            sent = await a.send(b.agent_id, "wake me from the commit")
            page = await asyncio.wait_for(poll, 40)  # an empty page after 25 s: not woken
            assert [e["task_id"] for e in page["events"]] == [sent["task_id"]]

            # The commit notice, and one event notice: the commit's, carrying the
            # event (with no push worker there is no other).
            seen: list[bytes] = []

            def events_seen() -> list[bytes]:
                return [n.carried for n in map(parse_notice, seen)
                        if n.agent_id == b.agent_id and n.kind == "event"]

            async with asyncio.timeout(10):
                while commit_notice(b.agent_id).encode() not in seen or not events_seen():
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        seen.append(message["data"])
            [carried] = events_seen()
            assert sent["task_id"].encode() in carried
    finally:
        await pubsub.aclose()
        await redis.aclose()


async def test_a_commit_notice_wakes_long_polls_only_never_streams(migrated: Settings,
                                                                   uniq: str) -> None:
    """SSE reads the Redis stream the push worker writes: woken by a commit notice
    it would find nothing there, so the hub must leave it parked."""
    hub = InboxHub(migrated.redis_url)
    redis = aioredis.from_url(migrated.redis_url)
    await hub.start()
    try:
        await asyncio.wait_for(hub.connected.wait(), 20)
        agent, marker = f"ag_{uniq}", f"ag_{uniq}_marker"
        async with hub.watch(agent, LONG_POLL) as poll, hub.watch(agent, STREAM) as stream, \
                hub.watch(marker, STREAM) as after_it:
            await redis.publish(NOTIFY_CHANNEL, commit_notice(agent))
            # Notices arrive in order on the one subscription: once the marker's
            # event notice has woken its waiter, the commit notice has been handled.
            await redis.publish(NOTIFY_CHANNEL, event_notice(marker, 1))
            assert await after_it.wait(20)
            assert await poll.wait(0)
            assert not await stream.wait(0)
            # An event notice (the push worker's) still wakes both kinds.
            await redis.publish(NOTIFY_CHANNEL, event_notice(agent, 1))
            assert await stream.wait(20)
            assert await poll.wait(20)
    finally:
        await hub.stop()
        await redis.aclose()


class Heard:
    """A hub listener: the notices the hub received, in order."""

    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self._more = asyncio.Event()

    def notice(self, notice: Notice) -> None:
        self.notices.append(notice)
        self._more.set()

    def reset(self) -> None:
        pass

    async def until(self, agent_id: str) -> None:
        while not any(n.agent_id == agent_id for n in self.notices):
            self._more.clear()
            await self._more.wait()

    def commits_of(self, agent_id: str) -> int:
        return sum(1 for n in self.notices if n.agent_id == agent_id and n.committed)


async def test_the_hub_follows_commit_notices_only_while_it_holds_a_long_poll(
        migrated: Settings, uniq: str) -> None:
    """A web process serving streams alone would wake for every send's commit and
    wake nobody: it hears an agent's commit notices only while a long-poll of that
    agent waits there, and until a while after the last one left (no while at all
    here)."""
    hub = InboxHub(migrated.redis_url)
    hub.LINGER_SECONDS = 0.0
    heard = Heard()
    hub.add_listener(heard)
    redis = aioredis.from_url(migrated.redis_url)
    agent = f"ag_{uniq}"
    commits = commit_channel(agent)

    async def a_commit_then_a_marker(n: int) -> None:
        # One connection, one order: once the hub hears the marker, it has heard
        # the commit notice published before it, or never will.
        await redis.publish(commits, commit_notice(agent))
        await redis.publish(NOTIFY_CHANNEL, event_notice(f"{agent}_marker{n}", 1))
        await heard.until(f"{agent}_marker{n}")

    await hub.start()
    try:
        async with asyncio.timeout(30):
            await hub.connected.wait()
            async with hub.watch(agent, STREAM):
                await a_commit_then_a_marker(1)
                assert heard.commits_of(agent) == 0 and not hub.channels.live(commits)

                async with hub.watch(agent, LONG_POLL) as poll:
                    assert hub.channels.live(commits)  # handed out once confirmed
                    await a_commit_then_a_marker(2)
                    assert heard.commits_of(agent) == 1
                    assert await poll.wait(0)

                # The stream stays; the long-poll left, and with it the commits.
                await hub.channels.until(commits, live=False)
                assert hub.channels.live(inbox_channel(agent))
                await a_commit_then_a_marker(3)
                assert heard.commits_of(agent) == 1
    finally:
        await hub.stop()
        await redis.aclose()


async def test_a_failed_commit_notice_is_logged_never_raised(
        quiet_webs: list[MeshProcess], iso: Settings, caplog: pytest.LogCaptureFixture) -> None:
    """The write is durable once committed: a Redis that cannot take the notice
    must not turn it into an error (the long-poll's own re-read is the net)."""
    async with MeshFactory.connect(quiet_webs[0].url) as mesh:
        _, b = await mesh.pair()
    pool = await create_pool(iso, min_size=1, max_size=2)
    nowhere = aioredis.from_url(f"redis://127.0.0.1:{free_port()}", socket_connect_timeout=1)
    wakeup = AfterCommit(pool, nowhere)
    await wakeup.start()
    try:
        async with writes(pool, topic=iso.bus_topic, wakeup=wakeup) as tx:
            [row] = await tx.append([NewEvent(agent_id=b.agent_id, type="test.ping",
                                              payload={})])
        assert await pool.fetchval("SELECT count(*) FROM inbox_events WHERE agent_id = $1 "
                                   "AND seq = $2", b.agent_id, row["seq"]) == 1
        async with asyncio.timeout(20):
            while "could not signal after a commit" not in caplog.text:  # noqa: ASYNC110
                await asyncio.sleep(0.02)  # a log line has no event to await
    finally:
        await wakeup.stop()
        await nowhere.aclose()
        await pool.close()
