"""Webhook delivery over real HTTP: order, exactly-once acks, retries, the breaker,
isolation between agents, and the connect-time SSRF rule (ADR 035).

The receivers are real servers on 127.0.0.1 (tests/support/webhook_receiver.py),
so these gateways run with MESH_WEBHOOK_ALLOW_PRIVATE=true; the worker is the
one ``python -m workers.webhook`` builds, in this event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg

from app.db import create_pool
from app.settings import Settings
from tests.api_helpers import ok, until
from tests.support.isolated import isolated_settings
from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle
from tests.support.servers import serve_app
from tests.support.webhook_receiver import Receiver
from workers import webhook as webhook_worker
from workers.runtime import running
from workers.webhook import WebhookWorker

FAST = {
    "webhook_allow_private": True,
    "webhook_timeout_seconds": 1.0,
    "webhook_retry_base_seconds": 0.02,
    "webhook_retry_cap_seconds": 0.1,
    "webhook_cooldown_seconds": 0.1,
    "webhook_cooldown_max_seconds": 0.4,
    "webhook_sweep_seconds": 0.5,
}


@dataclass
class Hooked:
    settings: Settings
    mesh: MeshFactory
    pool: asyncpg.Pool
    worker: WebhookWorker
    owner: OwnerHandle
    sender: AgentHandle

    async def receiver(self, name: str, **kw: Any) -> tuple[AgentHandle, Receiver]:
        """An agent of the owner with a webhook to a started receiver."""
        agent = await self.owner.agent(name)
        await self.mesh.befriend(self.sender, agent)
        rx = Receiver(**kw)
        await rx.start()
        created = ok(await self.owner.http.put(f"/v1/agents/{agent.agent_id}/webhook",
                                               json={"url": rx.url}, headers=self.owner.headers))
        rx.secret = created["secret"]
        return agent, rx

    async def send(self, to: AgentHandle, n: int, tag: str = "m") -> None:
        gate = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with gate:
                await self.sender.send(to.agent_id, f"{tag}-{i}")

        await asyncio.gather(*(one(i) for i in range(n)))

    async def inbox_ids(self, agent: AgentHandle) -> list[tuple[int, str]]:
        rows = await self.pool.fetch("SELECT seq, event_id FROM inbox_events WHERE agent_id = $1 "
                                     "ORDER BY seq", agent.agent_id)
        return [(r["seq"], r["event_id"]) for r in rows]

    async def webhook(self, agent: AgentHandle) -> dict[str, Any]:
        return ok(await self.owner.get(f"/v1/agents/{agent.agent_id}/webhook"))  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def hooked_mesh(base: Settings, **overrides: Any) -> AsyncIterator[Hooked]:
    settings = await isolated_settings(base, **(FAST | overrides))
    pool = await create_pool(settings, min_size=1, max_size=4)
    try:
        async with serve_app(settings) as url, MeshFactory.connect(url) as mesh, \
                running(webhook_worker.build, settings) as worker:
            owner = await mesh.owner()
            sender = await owner.agent("sender")
            yield Hooked(settings, mesh, pool, worker, owner, sender)
    finally:
        await pool.close()


async def test_events_arrive_signed_in_order_and_are_acked(migrated):
    async with hooked_mesh(migrated) as h:
        agent, rx = await h.receiver("one")
        await h.send(agent, 30)
        expected = await h.inbox_ids(agent)
        assert len(expected) >= 30  # the friendship's events came first
        await rx.wait(lambda r: len(r.received) >= len(expected))
        assert [(r.seq, r.event_id) for r in rx.received] == expected
        assert rx.bad_signatures == 0
        body = rx.received[0]
        assert body.headers["webhook-id"] == body.event_id
        assert body.headers["webhook-signature"].startswith("v1,")
        # The same bytes the long-poll (and SSE) hand out for that seq.
        page = await agent.inbox(after=0)
        assert [r.body for r in rx.received] == [
            json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode()
            for e in page["events"]]
        await until(lambda: h.pool.fetchval(
            "SELECT acked_seq = inbox_seq FROM agents WHERE agent_id = $1", agent.agent_id))
        state = await h.webhook(agent)
        assert state["status"] == "ok" and state["pending"] == 0 and state["last_success_at"]
        receipts = await h.pool.fetchval(
            "SELECT count(*) FROM inbox_events WHERE agent_id = $1 AND delivered_at IS NULL",
            agent.agent_id)
        assert receipts == 0
