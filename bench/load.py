"""Shared pieces of the scenarios: who talks to whom, one send, one SSE follower.

Agents are made through the real HTTP API with the test harness
(``tests.support.load.build_cast``: one owner's agents in one group, so every
sender may message every recipient); the hot path then uses the lean client
of ``bench.client``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import asyncpg
import httpx

from bench.client import Client, Response, SseEvent, SseStream
from tests.support.load import build_cast
from tests.support.meshapi import MeshFactory

TEXT = "benchmark message " + "x" * 80   # ~100-byte text part, like a short instruction


@dataclass(frozen=True)
class Agent:
    agent_id: str
    headers: dict[str, str]
    api_key: str = ""


@dataclass(frozen=True)
class Cast:
    owner: str
    senders: list[Agent]
    recipients: list[Agent]


class PatientTransport(httpx.AsyncHTTPTransport):
    """Waits out a 429 (its ``Retry-After``) and asks again: a stack with a user's
    rate limits (bench/blackbox.py) refuses one owner making a hundred agents at once."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(100):
            resp = await super().handle_async_request(request)
            if resp.status_code != 429:
                return resp
            await resp.aread()
            await asyncio.sleep(max(0.01, float(resp.headers.get("retry-after") or 0.1)))
        return resp


async def make_cast(base_url: str, n_senders: int, n_recipients: int) -> Cast:
    async with MeshFactory.connect(base_url, transport=PatientTransport()) as mesh:
        cast = await build_cast(mesh, n_senders, n_recipients)
    return Cast(cast.owner.username,
                [Agent(a.agent_id, a.headers, a.api_key) for a in cast.senders],
                [Agent(a.agent_id, a.headers, a.api_key) for a in cast.recipients])


def new_message_id() -> str:
    return f"m-bench-{uuid.uuid4().hex}"


async def send(client: Client, sender: Agent, to: str, message_id: str) -> Response:
    body = {"to_agent_id": to, "message": {"message_id": message_id,
                                           "parts": [{"kind": "text", "text": TEXT}]}}
    return await client.request("POST", "/v1/mesh/tasks", sender.headers, body)


async def inbox_seqs(database_url: str, agent_ids: list[str]) -> dict[str, int]:
    """Where each inbox stands now, so a stream can start after it (no replay)."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT agent_id, inbox_seq FROM agents WHERE agent_id = ANY($1)",
                                agent_ids)
    finally:
        await conn.close()
    return {r["agent_id"]: r["inbox_seq"] for r in rows}


async def db_now(database_url: str) -> object:
    """Postgres's clock: rows' ``created_at`` are on it, not on the bench's."""
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchval("SELECT clock_timestamp()")
    finally:
        await conn.close()


async def relay_batches_since(database_url: str, topic: str, since: object) -> tuple[int, int]:
    """Rows sent since ``since`` and in how many relay transactions: a batch marks its
    rows in one statement, with one timestamp, so distinct ``sent_at`` values count
    the batches."""
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, count(DISTINCT sent_at) AS b FROM outbox_events "
            "WHERE topic = $1 AND status = 'sent' AND created_at >= $2", topic, since)
        return int(row["n"]), int(row["b"])
    finally:
        await conn.close()


async def open_stream(base_url: str, agent: Agent, after: int,
                      on_event: Callable[[SseStream, SseEvent], None] | None = None) -> SseStream:
    url = urlsplit(base_url)
    stream = await SseStream.open(url.hostname or "127.0.0.1", url.port or 80,
                                  f"/v1/mesh/inbox/stream?after={after}", agent.headers, on_event)
    status = await stream.status
    if status != 200:
        stream.close()
        raise RuntimeError(f"SSE for {agent.agent_id}: HTTP {status}")
    return stream


def message_id_of(event: SseEvent) -> str | None:
    try:
        data = json.loads(event.data)
        return data["payload"]["message"]["message_id"]  # type: ignore[no-any-return]
    except (ValueError, KeyError, TypeError):
        return None
