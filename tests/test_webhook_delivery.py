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
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from standardwebhooks import Webhook

from app.delivery.protocol import commit_channel, inbox_channel
from app.platform.db import create_pool
from app.platform.metrics import WEBHOOK_FAILURES
from app.platform.settings import Settings
from app.store import webhooks as webhooks_store
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

    async def receives_all(self, agent: AgentHandle, rx: Receiver,
                           timeout: float = 120.0) -> list[tuple[int, str]]:
        """Wait until ``rx`` holds as many deliveries as the agent has inbox events,
        and assert they are exactly those events, in seq order, once each."""
        expected = await self.inbox_ids(agent)
        await rx.wait(lambda r: len(r.received) >= len(expected), timeout)
        assert [(r.seq, r.event_id) for r in rx.received] == expected
        return expected

    async def lane_ended(self, agent: AgentHandle) -> None:
        """The agent's lane gave up its lease: nothing of it runs that could read a send."""
        await until(lambda: self.pool.fetchval(
            "SELECT lease_owner IS NULL FROM agent_webhooks WHERE agent_id = $1", agent.agent_id))

    async def webhook(self, agent: AgentHandle) -> dict[str, Any]:
        return ok(await self.owner.get(f"/v1/agents/{agent.agent_id}/webhook"))  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def hooked_mesh(base: Settings, worker_overrides: dict[str, Any] | None = None,
                      **overrides: Any) -> AsyncIterator[Hooked]:
    settings = await isolated_settings(base, **(FAST | overrides))
    worker_settings = Settings(**(settings.model_dump() | (worker_overrides or {})))
    pool = await create_pool(settings, min_size=1, max_size=4)
    try:
        async with serve_app(settings) as url, MeshFactory.connect(url) as mesh, \
                running(webhook_worker.build, worker_settings) as worker:
            owner = await mesh.owner()
            sender = await owner.agent("sender")
            yield Hooked(settings, mesh, pool, worker, owner, sender)
    finally:
        await pool.close()


async def test_events_arrive_signed_in_order_and_are_acked(migrated):
    async with hooked_mesh(migrated) as h:
        agent, rx = await h.receiver("one")
        await h.send(agent, 30)
        expected = await h.receives_all(agent, rx)
        assert len(expected) >= 30  # the friendship's events came first
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


async def test_a_lane_starts_from_the_commit_notice(migrated):
    """No relay or push worker runs here (no event notices), the lane ends as soon as
    it is caught up, and the worker's sweep is an hour away: only the commit notice
    the web process publishes on its own channel can start the lane for a new send."""
    quiet = {"webhook_sweep_seconds": 3600.0, "webhook_linger_seconds": 0.0}
    async with hooked_mesh(migrated, worker_overrides=quiet) as h:
        agent, rx = await h.receiver("woken")
        before = await h.inbox_ids(agent)
        await rx.wait(lambda r: len(r.received) >= len(before))  # the registration's start
        await h.lane_ended(agent)
        await h.send(agent, 1, tag="after")
        await h.receives_all(agent, rx, timeout=30)


# Events in the chaos run: 1,000 by default (MESH_WEBHOOK_TEST_EVENTS to change).
EVENTS = int(os.environ.get("MESH_WEBHOOK_TEST_EVENTS", "1000"))


def failing_for(n_failures: int, then: str = "ok"):
    return lambda n: "fail" if n <= n_failures else then


@pytest.mark.slow
async def test_chaos_every_event_once_in_order(migrated):
    """Five webhook agents, EVENTS events between them; receivers answer 500 for a
    while, hang past the timeout, restart, and one goes down for good."""
    per_agent = EVENTS // 5
    async with hooked_mesh(migrated) as h:
        erratic, rx_erratic = await h.receiver("erratic", behaviour=failing_for(40))
        hangs, rx_hangs = await h.receiver(
            "hangs", behaviour=lambda n: "hang" if n <= 3 else ("fail" if n % 50 == 0 else "ok"))
        restarts, rx_restarts = await h.receiver("restarts")
        steady, rx_steady = await h.receiver("steady")
        dies, rx_dies = await h.receiver("dies")
        live = [(erratic, rx_erratic), (hangs, rx_hangs), (restarts, rx_restarts),
                (steady, rx_steady)]

        sending = asyncio.gather(*(h.send(a, per_agent) for a, _ in [*live, (dies, rx_dies)]))
        # Take the dying one down once it had a few; and restart the other mid-run.
        await rx_dies.wait(lambda r: len(r.received) >= 3)
        await rx_dies.stop()
        await rx_restarts.wait(lambda r: len(r.received) >= per_agent // 4)
        await rx_restarts.stop()
        await until(lambda: h.pool.fetchval(
            "SELECT failures >= 2 FROM agent_webhooks WHERE agent_id = $1", restarts.agent_id))
        await rx_restarts.start()
        await sending

        for agent, rx in live:
            expected = await h.inbox_ids(agent)
            assert len(expected) >= per_agent
            await rx.wait_received(len(expected))
            got = [(r.seq, r.event_id) for r in rx.received]
            assert got == expected, f"{agent.agent_id}: not every event exactly once in order"
            assert rx.bad_signatures == 0
        assert rx_erratic.requests > len(rx_erratic.received)  # the 500s were retried

        # The dead one: breaker open, the agent inactive, every event still in the inbox.
        await until(lambda: h.pool.fetchval(
            "SELECT breaker = 'open' FROM agent_webhooks WHERE agent_id = $1", dies.agent_id))
        state = await h.webhook(dies)
        all_dies = await h.inbox_ids(dies)
        assert state["status"] == "open" and state["last_error"]
        assert state["pending"] == len(all_dies) - len(rx_dies.received)
        page = await dies.inbox(after=0, limit=500)
        assert [(e["seq"], e["event_id"]) for e in page["events"]] == all_dies[:500]
        agent_dies = ok(await h.owner.get(f"/v1/agents/{dies.agent_id}"))
        agent_erratic = ok(await h.owner.get(f"/v1/agents/{erratic.agent_id}"))
        assert agent_dies["status"] == "inactive" and agent_erratic["status"] == "active"
        for agent, _ in live:
            assert (await h.webhook(agent))["status"] == "ok"


async def test_a_slow_receiver_delays_only_its_own_agent(migrated):
    async with hooked_mesh(migrated, webhook_timeout_seconds=60.0) as h:
        slow, rx_slow = await h.receiver("slow", behaviour=lambda n: "hang" if n == 1 else "ok")
        others = [await h.receiver(f"fast{i}") for i in range(3)]
        await h.send(slow, 20)
        await rx_slow.wait(lambda r: r.hanging == 1)
        await asyncio.gather(*(h.send(a, 40) for a, _ in others))
        for agent, rx in others:
            await h.receives_all(agent, rx)
        # Everything of the others arrived while the slow one was still stuck on its first.
        assert rx_slow.hanging == 1 and rx_slow.received == []
        rx_slow.release.set()
        await h.receives_all(slow, rx_slow)


def refused_count() -> float:
    return WEBHOOK_FAILURES.labels(reason="refused")._value.get()


async def test_private_targets_refused_at_connect_time(migrated):
    """A URL that passed registration but now resolves to a private address (DNS
    rebinding) is refused when connecting: the worker here does not allow private
    targets although the gateway that registered them did."""
    before = refused_count()
    async with hooked_mesh(migrated, worker_overrides={"webhook_allow_private": False}) as h:
        targets = []
        for i, host in enumerate(["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"]):
            agent, rx = await h.receiver(f"rebind{i}")
            ok(await h.owner.http.put(f"/v1/agents/{agent.agent_id}/webhook",
                                      json={"url": f"http://{host}:{rx.port}/hook"},
                                      headers=h.owner.headers))
            targets.append((agent, rx))
            await h.send(agent, 3)
        for agent, _ in targets:
            await until(lambda a=agent: h.pool.fetchval(
                "SELECT breaker = 'open' FROM agent_webhooks WHERE agent_id = $1", a.agent_id))
            state = await h.webhook(agent)
            assert "refused" in state["last_error"] and state["pending"] >= 3
        attempts = refused_count() - before
        assert attempts >= 3 * migrated.webhook_breaker_failures  # 15 attempts, 15 refused
        assert all(rx.requests == 0 for _, rx in targets)  # none reached a receiver


async def test_redirects_are_not_followed(migrated):
    async with hooked_mesh(migrated) as h:
        agent, rx = await h.receiver("redirected", behaviour=lambda n: "redirect")
        await h.send(agent, 1)
        await until(lambda: h.pool.fetchval(
            "SELECT breaker = 'open' FROM agent_webhooks WHERE agent_id = $1", agent.agent_id))
        state = await h.webhook(agent)
        assert "302" in state["last_error"] and "not followed" in state["last_error"]
        assert rx.received == [] and state["pending"] >= 1


async def test_rotation_signs_with_both_secrets_during_the_grace(migrated):
    async with hooked_mesh(migrated) as h:
        agent, rx = await h.receiver("rotated")
        old = rx.secret
        rotated = ok(await h.owner.http.put(f"/v1/agents/{agent.agent_id}/webhook",
                                            json={"url": rx.url}, headers=h.owner.headers))
        rx.secret = rotated["secret"]
        await h.send(agent, 1)
        expected = await h.inbox_ids(agent)
        await rx.wait_received(len(expected))
        last = rx.received[-1]
        assert len(last.headers["webhook-signature"].split(" ")) == 2
        Webhook(old).verify(last.body, last.headers)  # a receiver not yet updated
        Webhook(rx.secret).verify(last.body, last.headers)


async def test_a_lingering_lane_takes_a_replaced_url_at_once(migrated):
    """A caught-up lane keeps its lease a moment and re-reads the registration
    (without a write) when the next event comes: a URL replaced meanwhile gets it."""
    async with hooked_mesh(migrated, worker_overrides={"webhook_linger_seconds": 30.0}) as h:
        agent, first = await h.receiver("moved")
        await h.send(agent, 1)
        before = await h.inbox_ids(agent)
        await first.wait_received(len(before))
        assert ("webhook", agent.agent_id) in h.worker._lanes  # lingering, lease held
        second = Receiver()
        await second.start()
        try:
            moved = ok(await h.owner.http.put(f"/v1/agents/{agent.agent_id}/webhook",
                                              json={"url": second.url},
                                              headers=h.owner.headers))
            second.secret = moved["secret"]
            await h.send(agent, 3, tag="after")
            after = (await h.inbox_ids(agent))[len(before):]
            await second.wait_received(len(after))
            assert [(r.seq, r.event_id) for r in second.received] == after
            assert second.bad_signatures == 0
            assert len(first.received) == len(before)
        finally:
            await second.stop()


async def test_peek_reads_a_live_lease_of_its_owner_only(migrated):
    async with hooked_mesh(migrated) as h:
        agent = await h.owner.agent("leased")
        ok(await h.owner.http.put(f"/v1/agents/{agent.agent_id}/webhook",
                                  json={"url": "http://127.0.0.1:9/hook"},
                                  headers=h.owner.headers))
        await h.worker.stop()  # nobody else takes the lease meanwhile
        claimed = await webhooks_store.claim(h.pool, agent.agent_id, "me", 60.0)
        assert claimed is not None
        seen = await webhooks_store.peek(h.pool, agent.agent_id, "me")
        assert seen is not None and seen["url"] == "http://127.0.0.1:9/hook"
        assert seen["cursor"] == claimed["cursor"]
        assert await webhooks_store.peek(h.pool, agent.agent_id, "someone else") is None
        await h.pool.execute("UPDATE agent_webhooks SET lease_until = now() - interval '1 s' "
                             "WHERE agent_id = $1", agent.agent_id)
        assert await webhooks_store.peek(h.pool, agent.agent_id, "me") is None


async def followers(redis: aioredis.Redis, of: AgentHandle) -> list[int]:
    """How many connections follow the agent's commit and its event channel."""
    found = await redis.pubsub_numsub(commit_channel(of.agent_id), inbox_channel(of.agent_id))
    return [n for _, n in found]


async def test_the_worker_follows_the_channels_of_the_agents_its_sweep_finds(
        migrated, redis_client):
    """A webhook process hears the commit and event notices of the agents it serves
    and no others; a registration its next sweep no longer finds is dropped."""
    async with hooked_mesh(migrated) as h:
        agent, _ = await h.receiver("followed")

        async def followed_by(n: int) -> bool:
            return await followers(redis_client, agent) == [n, n]

        await until(lambda: followed_by(1))
        assert await followers(redis_client, h.sender) == [0, 0]  # no webhook: nothing
        gone = await h.owner.http.delete(f"/v1/agents/{agent.agent_id}/webhook",
                                         headers=h.owner.headers)
        assert gone.status_code == 204
        await until(lambda: followed_by(0))


async def test_a_lost_subscription_follows_the_agents_again(migrated, redis_client):
    """Redis drops the worker's subscription: the new one follows the channels of the
    agents it serves again, and with the sweep an hour away (the one the reconnect
    runs is over) only a notice on them can start the lane for the next send."""
    quiet = {"webhook_sweep_seconds": 3600.0, "webhook_linger_seconds": 0.0}
    async with hooked_mesh(migrated, worker_overrides=quiet) as h:
        agent, rx = await h.receiver("refollowed")
        swept = asyncio.Event()
        sweep = h.worker.sweep

        async def noted() -> None:
            await sweep()
            swept.set()

        h.worker.sweep = noted  # type: ignore[method-assign]

        async def followed() -> bool:
            return await followers(redis_client, agent) == [1, 1]

        before = await h.inbox_ids(agent)
        await rx.wait(lambda r: len(r.received) >= len(before))
        await h.lane_ended(agent)
        await until(followed)
        # Every subscription of this Redis is the worker's or a web process's: end them all.
        killed = {c["id"] for c in await redis_client.client_list(_type="pubsub")}
        assert killed
        swept.clear()
        for client_id in killed:
            await redis_client.client_kill_filter(_id=client_id)
        assert not killed & {c["id"] for c in await redis_client.client_list(_type="pubsub")}
        await until(followed)  # by a new connection: the old ones are gone
        await asyncio.wait_for(swept.wait(), 30)  # the reconnect's sweep is over
        await h.send(agent, 1, tag="after")
        await h.receives_all(agent, rx, timeout=30)
