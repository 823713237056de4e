"""SIGTERM to every Procfile process during a load of sends loses nothing.

web, outbox, push and cron run as real OS processes (tests/support/procs.py) on a
mesh of their own (tests/support/isolated.py), so they are the only ones
delivering. Senders keep posting messages with explicit message ids while each
process in turn gets SIGTERM, must exit with code 0 within a bounded wait, and
is started again. Then every accepted (2xx) message is counted: in the
recipient's inbox in Postgres exactly once, every seq exactly once in the push
stream and on an SSE connection, nothing left pending in the outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis
from httpx_sse import aconnect_sse

from app.delivery.protocol import inbox_stream_key
from app.platform import db
from app.platform.settings import Settings
from tests.support.isolated import isolated_settings, outbox_counts, wait_until
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.procs import MeshProcess

pytestmark = pytest.mark.faults

SENDERS = 3
# A generous bound for a clean exit on a loaded 2-core machine; a process that
# ignores SIGTERM hits it (and is killed), a graceful one is far below it.
EXIT_BOUND_SECONDS = 30.0
# uvicorn finishes its graceful shutdown (in-flight requests answered, lifespan
# shutdown run) and then re-raises the SIGTERM it caught, so a parent sees the
# signal: the web process's clean exit status is "killed by SIGTERM" (-15 here,
# 143 in a shell). The arq and push workers return normally: 0.
CLEAN_EXIT = {"web": -signal.SIGTERM, "outbox": 0, "push": 0, "cron": 0}


@dataclass
class Load:
    """Senders posting messages to one task; what the gateway acknowledged is counted."""

    url: str
    sender: AgentHandle
    task_id: str
    accepted: set[str] = field(default_factory=set)
    uncertain: set[str] = field(default_factory=set)  # no answer: may or may not be stored
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    prefix: str = field(default_factory=lambda: f"m-load-{uuid.uuid4().hex[:6]}")

    async def run(self, worker: int) -> None:
        n = 0
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                message_id = f"{self.prefix}-{worker}-{n}"
                n += 1
                body = {"message_id": message_id, "parts": [{"kind": "text", "text": message_id}]}
                try:
                    resp = await client.post(f"/v1/mesh/tasks/{self.task_id}/messages",
                                             json=body, headers=self.sender.headers)
                except httpx.HTTPError:
                    self.uncertain.add(message_id)
                    await asyncio.sleep(0.05)  # the web process is down: pace the retries
                    continue
                if resp.status_code in (200, 201):
                    self.accepted.add(message_id)
                else:
                    self.uncertain.add(message_id)
                    await asyncio.sleep(0.05)

    async def more(self, n: int, what: str) -> None:
        """Wait until ``n`` more messages were accepted."""
        target = len(self.accepted) + n
        await wait_until(lambda: len(self.accepted) >= target, f"{n} accepted sends {what}", 60)


@contextlib.asynccontextmanager
async def processes(settings: Settings) -> AsyncIterator[dict[str, MeshProcess]]:
    procs = {kind: MeshProcess(kind, settings) for kind in ("web", "outbox", "push", "cron")}
    try:
        await asyncio.gather(*(p.start() for p in procs.values()))
        yield procs
    finally:
        for p in procs.values():
            p.stop_quietly()


async def inbox_events(agent: AgentHandle, url: str) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    after = 0
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while True:
            resp = await client.get("/v1/mesh/inbox", params={"after": after, "limit": 500},
                                    headers=agent.headers)
            assert resp.status_code == 200, resp.text
            page = resp.json()
            if not page["events"]:
                return events
            events += page["events"]
            after = page["next_after"]


async def sse_seqs(url: str, agent: AgentHandle, until: int) -> list[int]:
    seqs: list[int] = []
    async with httpx.AsyncClient(base_url=url, timeout=None) as client, \
            aconnect_sse(client, "GET", "/v1/mesh/inbox/stream", params={"after": 0},
                         headers=agent.headers) as source:
        async for sse in source.aiter_sse():
            seqs.append(int(sse.id))
            if seqs[-1] >= until:
                break
    return seqs


async def hold_sse(url: str, agent: AgentHandle, opened: asyncio.Event) -> str:
    """An SSE client that stays connected until the server ends the stream."""
    async with httpx.AsyncClient(base_url=url, timeout=None) as client:
        try:
            async with aconnect_sse(client, "GET", "/v1/mesh/inbox/stream",
                                    headers=agent.headers) as source:
                opened.set()
                async for _ in source.aiter_sse():
                    pass
        except httpx.HTTPError as exc:
            return f"dropped: {type(exc).__name__}"
    return "closed by server"


async def test_sigterm_to_each_process_under_load_loses_nothing(
        migrated: Settings, redis_client: aioredis.Redis) -> None:
    settings = await isolated_settings(migrated)
    pool: asyncpg.Pool = await db.create_pool(settings, min_size=1, max_size=2)
    try:
        async with processes(settings) as procs:
            url = procs["web"].url
            async with MeshFactory.connect(url) as mesh:
                a, b = await mesh.pair()
                task = await a.send(b.agent_id, "load follows")
            load = Load(url, a, task["task_id"])
            senders = [asyncio.create_task(load.run(i)) for i in range(SENDERS)]
            try:
                await load.more(30, "before any SIGTERM")
                for kind in ("web", "outbox", "push", "cron"):
                    proc = procs[kind]
                    sse: asyncio.Task[str] | None = None
                    if kind == "web":
                        # Open streams must not hold the web process up.
                        opened = asyncio.Event()
                        sse = asyncio.create_task(hold_sse(url, b, opened))
                        await asyncio.wait_for(opened.wait(), 30)
                    code = await proc.terminate(timeout=EXIT_BOUND_SECONDS)
                    assert code == CLEAN_EXIT[kind], f"{kind} exited with {code}:\n{proc.tail()}"
                    if sse is not None:  # the stream was ended, the client may resume
                        assert await asyncio.wait_for(sse, 10)
                    if kind != "web":  # sends go on while a worker is down
                        await load.more(20, f"while {kind} is down")
                    await proc.restart()
                    await load.more(30, f"after {kind} restarted")
            finally:
                load.stop.set()
                await asyncio.gather(*senders)

            assert len(load.accepted) >= 30 + 4 * 30 + 3 * 20

            # Everything accepted reaches the recipient; nothing is left behind.
            await wait_until(lambda: _outbox_drained(pool), "the outbox to drain", 60)
            inbox_seq = await pool.fetchval("SELECT inbox_seq FROM agents WHERE agent_id = $1",
                                            b.agent_id)
            await wait_until(lambda: _stream_has(redis_client, b.agent_id, inbox_seq),
                             "the push stream to catch up", 60)

            events = await inbox_events(b, url)
            assert [e["seq"] for e in events] == list(range(1, inbox_seq + 1))
            delivered = [e["payload"]["message"]["message_id"]  # type: ignore[index]
                         for e in events if e["type"] == "task.message"]
            assert len(delivered) == len(set(delivered)), "a message was stored twice"
            assert load.accepted <= set(delivered), \
                f"lost {len(load.accepted - set(delivered))} accepted messages"
            assert set(delivered) <= load.accepted | load.uncertain

            entries = await redis_client.xrange(inbox_stream_key(b.agent_id))
            stream = [json.loads(fields[b"e"])["seq"] for _, fields in entries]
            assert stream == list(range(1, inbox_seq + 1)), "the push stream missed or repeated"
            assert await asyncio.wait_for(sse_seqs(url, b, inbox_seq), 60) == \
                list(range(1, inbox_seq + 1))
            assert (await outbox_counts(pool))["failed"] == 0
    finally:
        await pool.close()


async def _outbox_drained(pool: asyncpg.Pool) -> bool:
    return (await outbox_counts(pool))["pending"] == 0


async def _stream_has(redis: aioredis.Redis, agent_id: str, seq: int) -> bool:
    last = await redis.xrevrange(inbox_stream_key(agent_id), count=1)
    return bool(last) and json.loads(last[0][1][b"e"])["seq"] >= seq
