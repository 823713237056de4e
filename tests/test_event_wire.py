"""One event, the same bytes on every path (ADR 014).

An event sent once is read back live over SSE (from the Redis stream the push
worker wrote, i.e. the relay's bytes), over SSE catch-up (from Postgres), over
long-poll (inside the page envelope) and through the meshd SDK; all agree byte
for byte — also when the database session's time zone is not UTC, which once
changed the timestamp of the SQL-built outbox copy only.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis

from app.delivery import protocol as delivery
from app.platform import db as app_db
from app.platform.settings import Settings
from meshd.client import MeshClient
from tests.support.isolated import wait_until
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.pipeline import run_pipeline

Frame = tuple[int, bytes, bytes]  # seq, type, data


async def read_frames(http: httpx.AsyncClient, agent: AgentHandle, after: int,
                      until_seq: int, on_frame: asyncio.Event | None = None,
                      first_seq: int | None = None) -> dict[int, Frame]:
    """The raw SSE frames after ``after`` up to ``until_seq``; ``on_frame`` is set
    once ``first_seq`` arrived (the stream is then past its catch-up)."""
    frames: dict[int, Frame] = {}
    headers = agent.headers | {"Last-Event-ID": str(after), "Accept": "text/event-stream"}
    async with http.stream("GET", "/v1/mesh/inbox/stream", headers=headers) as resp:
        assert resp.status_code == 200
        buf = b""
        async for chunk in resp.aiter_bytes():
            buf += chunk
            while b"\r\n\r\n" in buf:
                raw, buf = buf.split(b"\r\n\r\n", 1)
                fields = dict(line.split(b": ", 1) for line in raw.split(b"\r\n")
                              if not line.startswith(b":"))
                if b"id" not in fields:
                    continue  # a keep-alive
                seq = int(fields[b"id"])
                frames[seq] = (seq, fields[b"event"], fields[b"data"])
                if on_frame is not None and seq == first_seq:
                    on_frame.set()
                if seq >= until_seq:
                    return frames
    raise AssertionError(f"the stream ended before seq {until_seq}: {sorted(frames)}")


async def inbox_seq(agent: AgentHandle) -> int:
    resp = await agent.get("/v1/mesh/me")
    assert resp.status_code == 200, resp.text
    return int(resp.json()["inbox_seq"])


async def one_event_every_path(settings: Settings, redis: aioredis.Redis) -> bytes:
    async with run_pipeline(settings) as pipe, MeshFactory.connect(pipe.url) as mesh, \
            httpx.AsyncClient(base_url=pipe.url, timeout=30) as http:
        a, b = await mesh.pair()
        before = await inbox_seq(b)  # b's friend.request
        seq = before + 1

        # Live: the stream first catches up to `before`, then follows the notices
        # (the commit's carries the event, ADR 065).
        caught_up = asyncio.Event()
        live = asyncio.create_task(read_frames(http, b, before - 1, seq, caught_up, before))
        await asyncio.wait_for(caught_up.wait(), 30)
        task = await a.send(b.agent_id, "ünïcode\nand a newline",
                          message={"metadata": {"n": 1.5, "big": 10**20}})
        live_frame = (await asyncio.wait_for(live, 30))[seq]

        catch_up_frame = (await asyncio.wait_for(read_frames(http, b, before, seq), 30))[seq]

        page = await b.get("/v1/mesh/inbox", params={"after": before, "limit": 1})
        assert page.status_code == 200

        # The push worker's copy: written after the live frame went out.
        key, entry_id = delivery.inbox_stream_key(b.agent_id), delivery.entry_id(seq)
        [(_, fields)] = await wait_until(lambda: redis.xrange(key, min=entry_id, max=entry_id),
                                         "the push worker's stream entry", 30)

        async with MeshClient(pipe.url, api_key=b.api_key) as client:
            polled = (await client.poll_inbox(after=before)).events
            streamed = client.stream(after=before)
            sdk_streamed = await anext(streamed)
            await streamed.aclose()

    data = live_frame[2]
    assert live_frame == catch_up_frame == (seq, b"task.created", data)
    assert fields[delivery.EVENT_FIELD] == data, "the relay's bytes differ from Postgres's"
    assert fields[delivery.TYPE_FIELD] == b"task.created"
    assert page.content == b'{"events":[' + data + b'],"next_after":' + str(seq).encode() + b"}"
    event = json.loads(data)
    assert event["task_id"] == task["task_id"] and event["seq"] == seq
    assert event["created_at"].endswith("+00:00")
    # The SDK's view: the same event whichever way it came, and what the bytes say.
    assert [sdk_streamed] == polled
    assert (sdk_streamed.seq, sdk_streamed.event_id, sdk_streamed.created_at,
            sdk_streamed.payload) == (seq, event["event_id"], event["created_at"],
                                      event["payload"])
    return data


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai"])
async def test_one_event_has_one_wire_form(iso: Settings, db: asyncpg.Pool,
                                           redis_client: aioredis.Redis, zone: str) -> None:
    name = urlsplit(iso.database_url).path.lstrip("/")
    await db.execute(f"ALTER DATABASE \"{name}\" SET timezone TO '{zone}'")
    probe = await app_db.create_pool(iso, min_size=1, max_size=1)
    try:
        assert await probe.fetchval("SHOW timezone") == zone
        # What a SQL-built copy would have carried: the session's zone.
        offset = "+08" if zone == "Asia/Shanghai" else "+00"
        assert (await probe.fetchval("SELECT now()::text")).endswith(offset)
    finally:
        await probe.close()
    await one_event_every_path(iso, redis_client)


async def test_relay_encodes_events_and_dead_letters_a_missing_one(iso: Settings,
                                                                   pool: asyncpg.Pool) -> None:
    """An envelope whose inbox row is gone can never be published: it is
    dead-lettered with its reason while the rows around it are sent; a row
    without an event_id (another producer's) is relayed as it is."""
    from tests.support.isolated import relay_pending

    ids = [await pool.fetchval(
        "INSERT INTO outbox_events (topic, key, payload) VALUES ($1, 'x@y', $2) "
        "RETURNING id", iso.bus_topic, payload)
        for payload in ({"seq": 1}, {"seq": 2, "event_id": "e-gone"}, {"seq": 3})]
    assert await relay_pending(iso) == 3
    rows = {r["id"]: r for r in await pool.fetch(
        "SELECT id, status, attempts, last_error FROM outbox_events WHERE id = ANY($1)", ids)}
    assert [rows[i]["status"] for i in ids] == ["sent", "failed", "sent"]
    assert rows[ids[1]]["attempts"] == 1 and "not found" in rows[ids[1]]["last_error"]
