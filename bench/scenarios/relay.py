"""Scenario 3: one relay process draining a pre-filled outbox to the bus.

A fresh topic gets ``rows`` pending outbox rows (copies of a real event
payload from scenario 1, so record sizes are the gateway's), inserted in ONE
transaction that also NOTIFYs, as a write does. The real ``outbox`` process
(exactly the Procfile command) is already running for that topic; the
clock starts when the insert commits and stops when no pending row of the
topic is left. Every row must end ``sent`` (acknowledged by the broker).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import asyncpg

from app.platform.settings import Settings
from app.store.events import WAKEUP_CHANNEL
from bench.client import now
from bench.env import Env


@dataclass
class RelayRun:
    label: str
    bus: str
    batch: int
    rows: int
    seconds: float
    sent: int
    failed: int

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


async def sample_payload(database_url: str, topic: str) -> str:
    conn = await asyncpg.connect(database_url)
    try:
        payload = await conn.fetchval(
            "SELECT payload::text FROM outbox_events WHERE topic = $1 "
            "AND payload->>'type' = 'task.created' ORDER BY id DESC LIMIT 1",
            topic)
    finally:
        await conn.close()
    if payload is None:
        raise RuntimeError("no outbox row to copy a payload from ")
    return str(payload)


async def run(env: Env, settings: Settings, *, label: str, rows: int, payload: str,
              timeout: float = 300.0) -> RelayRun:
    topic = f"bench.relay-{uuid.uuid4().hex[:8]}"
    settings = Settings(**(settings.model_dump() | {"bus_topic": topic}))
    relay = await env.process("outbox", settings)
    conn = await asyncpg.connect(settings.database_url)
    try:
        # Let the relay's LISTEN connection come up before the NOTIFY.
        await asyncio.sleep(1.0)
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO outbox_events (topic, key, payload) "
                "SELECT $1, 'r' || (g % 64) || '@bench', $2::jsonb "
                "FROM generate_series(1, $3) g", topic, payload, rows)
            await conn.execute("SELECT pg_notify($1, '')", WAKEUP_CHANNEL)
        start = now()
        pending_sql = ("SELECT EXISTS (SELECT 1 FROM outbox_events "
                       "WHERE status = 'pending' AND topic = $1)")
        while await conn.fetchval(pending_sql, topic):
            if now() - start > timeout:
                raise TimeoutError(f"relay {label}: rows still pending after {timeout}s\n"
                                   f"{relay.tail()}")
            await asyncio.sleep(0.02)
        seconds = now() - start
        counts = dict(await conn.fetch(
            "SELECT status, count(*) FROM outbox_events WHERE topic = $1 GROUP BY status", topic))
    finally:
        await conn.close()
        await env.stop(relay)
    return RelayRun(label, settings.bus_kind, settings.relay_batch_size, rows, seconds,
                    int(counts.get("sent", 0)), int(counts.get("failed", 0)))
