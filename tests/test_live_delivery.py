"""Open streams hand over a committed event from the commit's own notice (ADR 065).

Two real web processes on a database of their own and, at first, NO relay and NO
push worker: nothing reaches the bus and the agents' Redis streams stay empty, so
every event an SSE stream hands over came in a notice a web process published
after its commit. Sends alternate between the two processes, so the notices for
one recipient come from both. Then the relay and the push worker start and put
the same events through the bus: the stream hands over none of them twice, and
the bytes both paths carry for a seq are the same. An event too large for a notice
to carry is announced without its bytes, and the stream reads it from Postgres.
"""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import redis.asyncio as aioredis
from httpx_sse import aconnect_sse

from app.delivery import protocol as delivery
from app.platform.settings import Settings
from tests.support.isolated import stream_holds, wait_until
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.procs import MeshProcess

SENDS = 40


class Stream:
    """One agent's SSE stream: each event's id and its data, as sent."""

    def __init__(self, base_url: str, agent: AgentHandle) -> None:
        self.events: list[tuple[int, bytes]] = []
        self._grew = asyncio.Event()
        self._task = asyncio.create_task(self._listen(base_url, agent))

    async def _listen(self, base_url: str, agent: AgentHandle) -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=None) as client, \
                aconnect_sse(client, "GET", "/v1/mesh/inbox/stream",
                             headers=agent.headers) as source:
            async for sse in source.aiter_sse():
                if sse.data:  # not a keep-alive
                    self.events.append((int(sse.id), sse.data.encode()))
                    self._grew.set()

    async def holds(self, count: int) -> None:
        async with asyncio.timeout(30):
            while len(self.events) < count:
                self._grew.clear()
                await self._grew.wait()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def test_streams_hand_over_events_from_the_commit_and_never_twice(
        quiet_webs: list[MeshProcess], iso: Settings) -> None:
    web_a, web_b = quiet_webs
    redis = aioredis.from_url(iso.redis_url)
    workers: list[MeshProcess] = []
    async with MeshFactory.connect(web_a.url) as mesh, \
            httpx.AsyncClient(base_url=web_b.url, timeout=30) as http_b:
        a, b = await mesh.pair()
        senders = [a, dataclasses.replace(a, http=http_b)]
        before = (await b.inbox())["next_after"]  # the friendship's events
        total = before + 1 + SENDS
        stream = Stream(web_b.url, b)
        try:
            # The first send proves the stream reads and follows its notices.
            await a.send(b.agent_id, "first")
            await stream.holds(before + 1)
            for i in range(SENDS):
                await senders[i % 2].send(b.agent_id, f"m{i}")
            await stream.holds(total)

            key = delivery.inbox_stream_key(b.agent_id)
            assert await redis.xlen(key) == 0  # nothing came through the bus
            assert [seq for seq, _ in stream.events] == list(range(1, total + 1))
            page = (await b.get("/v1/mesh/inbox", params={"after": 0, "limit": 500})).content
            for _, data in stream.events:
                assert data in page  # the bytes Postgres's page carries

            workers = [MeshProcess("outbox", iso), MeshProcess("push", iso)]
            await asyncio.gather(*(w.start() for w in workers))
            await wait_until(lambda: stream_holds(redis, key, total), "the push worker's stream", 30)
            written = {delivery.entry_seq(entry): fields[delivery.EVENT_FIELD]
                       for entry, fields in await redis.xrange(key)}
            assert written == dict(stream.events)  # the same bytes on both paths

            # One more send: whatever the bus path announced in between was not
            # handed over again.
            await a.send(b.agent_id, "last")
            await stream.holds(total + 1)
            assert [seq for seq, _ in stream.events] == list(range(1, total + 2))
        finally:
            await stream.close()
            for w in workers:
                w.stop_quietly()
            await redis.aclose()


async def test_an_event_too_large_to_carry_is_read_from_postgres_at_once(
        quiet_webs: list[MeshProcess], iso: Settings) -> None:
    """With no relay and no push worker, only the commit's notice announces the large
    event; the stream reads it from Postgres, in order between two small ones."""
    web_a, web_b = quiet_webs
    redis = aioredis.from_url(iso.redis_url)
    async with MeshFactory.connect(web_a.url) as mesh:
        a, b = await mesh.pair()
        before = (await b.inbox())["next_after"]
        stream = Stream(web_b.url, b)
        try:
            await a.send(b.agent_id, "first")
            await stream.holds(before + 1)
            large = "x" * (delivery.CARRY_MAX_BYTES + 1)
            await a.send(b.agent_id, large)
            # Alone: a later small event's offer after the hole would read it too.
            await stream.holds(before + 2)
            await a.send(b.agent_id, "after")
            await stream.holds(before + 3)
            assert [seq for seq, _ in stream.events] == list(range(1, before + 4))
            assert large.encode() in stream.events[-2][1]
            assert b'"after"' in stream.events[-1][1]
            assert await redis.xlen(delivery.inbox_stream_key(b.agent_id)) == 0
        finally:
            await stream.close()
            await redis.aclose()
