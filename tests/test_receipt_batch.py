"""Delivery receipts are marked in batches, off the request path (ADR 021).

Each test runs a real web process of its own on a database of its own, with the
batcher's interval and size chosen so that only the trigger under test can
flush: a size, or the graceful shutdown.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from httpx_sse import aconnect_sse

from app.platform.settings import Settings
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.procs import MeshProcess

NEVER_MS = 3_600_000  # an interval no test outlives: only the other trigger flushes


async def _delivered(db: asyncpg.Pool, agent: AgentHandle) -> dict[int, bool]:
    rows = await db.fetch("SELECT seq, delivered_at IS NOT NULL AS d FROM inbox_events "
                          "WHERE agent_id = $1 ORDER BY seq", agent.agent_id)
    return {r["seq"]: r["d"] for r in rows}


async def _e2e_count(http: httpx.AsyncClient) -> float:
    for line in (await http.get("/metrics")).text.splitlines():
        if line.startswith("agent_mesh_message_e2e_latency_seconds_count"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
async def iso_db(iso: Settings) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(iso.database_url, min_size=1, max_size=2)
    yield pool
    await pool.close()


async def test_a_full_batch_is_flushed_at_once_in_one_statement(iso: Settings,
                                                                iso_db: asyncpg.Pool) -> None:
    web = await MeshProcess("web", iso, receipt_flush_ms=NEVER_MS, receipt_flush_max=3).start()
    try:
        async with MeshFactory.connect(web.url) as mesh:
            a, b = await mesh.pair()
            for i in range(3):
                await a.send(b.agent_id, f"m{i}")
            base = await _e2e_count(mesh.http)
            events = len(await _delivered(iso_db, b))  # the friend request and m0..m2
            await b.inbox(after=0, limit=1)  # hand-over 1
            await b.inbox(after=1, limit=1)  # hand-over 2
            assert not any((await _delivered(iso_db, b)).values()), \
                "marked before the batch was full or its interval had passed"
            page = await b.inbox(after=2)  # hand-over 3 fills the batch
            assert len(page["events"]) == events - 2
            async with asyncio.timeout(20):
                while not all((await _delivered(iso_db, b)).values()):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)  # a row has no event to await
            # Each event once in the e2e histogram, from the flushed rows.
            assert await _e2e_count(mesh.http) == base + events
    finally:
        web.stop_quietly()


@pytest.mark.parametrize("via", ["long-poll", "sse"])
async def test_shutdown_flushes_the_queued_receipts(iso: Settings, iso_db: asyncpg.Pool,
                                                    via: str) -> None:
    web = await MeshProcess("web", iso, receipt_flush_ms=NEVER_MS,
                            receipt_flush_max=1000).start()
    try:
        async with MeshFactory.connect(web.url) as mesh:
            a, b = await mesh.pair()
            sent = await a.send(b.agent_id, "delivered just before the shutdown")
            if via == "long-poll":
                got = [e["task_id"] for e in (await b.inbox())["events"]]
            else:  # the stream's catch-up reads Postgres: no push worker needed
                got = await _streamed(mesh.http, b, len(await _delivered(iso_db, b)))
            assert sent["task_id"] in got
            # Handed over, and queued in the batcher rather than marked on the way.
            assert not any((await _delivered(iso_db, b)).values())
            # uvicorn re-raises the SIGTERM it handled, after its graceful shutdown.
            assert await web.terminate() in (0, -15), web.tail()
        # The process is gone: whatever it marked, it marked on the way out.
        assert all((await _delivered(iso_db, b)).values())
    finally:
        web.stop_quietly()


async def _streamed(http: httpx.AsyncClient, agent: AgentHandle, count: int) -> list[str | None]:
    got: list[str | None] = []
    async with aconnect_sse(http, "GET", "/v1/mesh/inbox/stream", headers=agent.headers,
                            params={"after": 0}) as source:
        async with asyncio.timeout(30):
            async for sse in source.aiter_sse():
                if sse.data:  # not a keep-alive
                    got.append(json.loads(sse.data).get("task_id"))
                    if len(got) == count:
                        break
    return got
