"""The web path caches across two real web processes (ADR 020).

Each process keeps who a token names and who may reach whom in memory, so
these tests first make the other process serve the fact from its cache, then
change it through the first process and ask the other at once: the notice
must have dropped it there (the TTL is an hour here, so only the notice can).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis

from app.delivery.protocol import CACHE_EPOCH_KEY, NOTIFY_CHANNEL
from app.platform.settings import Settings
from tests.api_helpers import ok, problem
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.procs import MeshProcess


@contextlib.asynccontextmanager
async def _webs(migrated: Settings, **extra: Any) -> AsyncIterator[tuple[MeshProcess, MeshProcess]]:
    """Two real web processes whose caches outlive the test (TTL an hour)."""
    webs = [MeshProcess("web", migrated, web_cache_ttl_seconds=3600, **extra) for _ in range(2)]
    try:
        await asyncio.gather(*(w.start() for w in webs))
        yield webs[0], webs[1]
    finally:
        for w in webs:
            w.stop_quietly()


@pytest.fixture
async def two_webs(migrated: Settings) -> AsyncIterator[tuple[MeshProcess, MeshProcess]]:
    async with _webs(migrated) as webs:
        yield webs


def on(agent: AgentHandle, http: httpx.AsyncClient) -> AgentHandle:
    """The same agent and token, talking to another web process."""
    return AgentHandle(agent.agent_id, agent.api_key, agent.key_id, http, agent.token)


async def test_a_key_revoked_on_one_process_is_refused_at_once_by_the_other(
        two_webs: tuple[MeshProcess, MeshProcess]) -> None:
    one, other = two_webs
    async with MeshFactory.connect(one.url) as mesh, \
            httpx.AsyncClient(base_url=other.url, timeout=30) as http:
        owner = await mesh.owner()
        agent = await owner.agent("revokee")
        there = on(agent, http)
        for _ in range(2):  # the second is served from the other process's cache
            assert (await there.get("/v1/mesh/me")).status_code == 200
        resp = await owner.delete(f"/v1/agents/{agent.agent_id}/keys/{agent.key_id}")
        assert resp.status_code == 204
        problem(await there.get("/v1/mesh/me"), 401, "revoked")
        problem(await agent.get("/v1/mesh/me"), 401, "revoked")


async def test_an_agent_deleted_on_one_process_is_refused_at_once_by_the_other(
        two_webs: tuple[MeshProcess, MeshProcess]) -> None:
    one, other = two_webs
    async with MeshFactory.connect(one.url) as mesh, \
            httpx.AsyncClient(base_url=other.url, timeout=30) as http:
        owner = await mesh.owner()
        agent = await owner.agent("doomed")
        there = on(agent, http)
        assert (await there.get("/v1/mesh/me")).status_code == 200
        assert (await owner.delete(f"/v1/agents/{agent.agent_id}")).status_code == 204
        problem(await there.get("/v1/mesh/me"), 401, "deleted")


async def test_an_unfriending_on_one_process_is_refused_at_once_by_the_other(
        two_webs: tuple[MeshProcess, MeshProcess]) -> None:
    one, other = two_webs
    async with MeshFactory.connect(one.url) as mesh, \
            httpx.AsyncClient(base_url=other.url, timeout=30) as http:
        a, b = await mesh.pair()
        a_there = on(a, http)
        for _ in range(2):  # the relationship is cached on the other process now
            await a_there.send(b.agent_id, "hello")
        resp = await b.delete(f"/v1/mesh/friends/{a.agent_id}")
        assert resp.status_code == 204
        body = {"to_agent_id": b.agent_id, "message": {"parts": [{"kind": "text", "text": "x"}]}}
        problem(await a_there.post("/v1/mesh/tasks", body), 403, "neither friends")
        problem(await a.post("/v1/mesh/tasks", body), 403, "neither friends")

        # …and becoming friends again is heard as quickly (a cached "no" would refuse).
        await mesh.befriend(b, a)
        await a_there.send(b.agent_id, "again")


async def test_a_group_membership_removed_on_one_process_is_refused_by_the_other(
        two_webs: tuple[MeshProcess, MeshProcess]) -> None:
    one, other = two_webs
    async with MeshFactory.connect(one.url) as mesh, \
            httpx.AsyncClient(base_url=other.url, timeout=30) as http:
        # Two owners: an owner's own agents reach each other without any group.
        owner, other_owner = await mesh.owner(), await mesh.owner()
        x, y = await owner.agent("x"), await other_owner.agent("y")
        # Another owner's agent joins only through a friend of one of the owner's agents.
        await mesh.befriend(await owner.agent("z"), y)
        group = f"g-{owner.username}"
        assert (await owner.post("/v1/groups", {"group_id": group, "name": "g"})).status_code == 201
        for member in (x, y):
            resp = await owner.post(f"/v1/groups/{group}/members", {"agent_id": member.agent_id})
            assert resp.status_code == 201, resp.text
        ok(await y.post(f"/v1/mesh/groups/invitations/{group}/accept"))
        x_there = on(x, http)
        await x_there.send(y.agent_id, "via the group")
        resp = await owner.delete(f"/v1/groups/{group}/members/{y.agent_id}")
        assert resp.status_code == 204
        body = {"to_agent_id": y.agent_id, "message": {"parts": [{"kind": "text", "text": "x"}]}}
        problem(await x_there.post("/v1/mesh/tasks", body), 403, "neither friends")


async def _subscriber_ids(redis: aioredis.Redis) -> set[int]:
    """The Redis client ids of the connections subscribed to the notices."""
    clients = await redis.client_list(_type="pubsub")
    return {int(c["id"]) for c in clients if int(c.get("sub", 0)) > 0}


async def test_a_redis_reconnect_drops_the_cache(
        two_webs: tuple[MeshProcess, MeshProcess], db: asyncpg.Pool,
        redis_client: aioredis.Redis) -> None:
    """A change made behind the caches' back (no notice: as if it was lost while
    Redis was away) is served stale until the hub resubscribes — then dropped."""
    one, other = two_webs
    async with MeshFactory.connect(one.url) as mesh, \
            httpx.AsyncClient(base_url=other.url, timeout=30) as http:
        owner = await mesh.owner()
        agent = await owner.agent("cached")
        there = on(agent, http)
        assert (await there.get("/v1/mesh/me")).status_code == 200
        await db.execute("UPDATE api_keys SET revoked_at = now() WHERE key_id = $1", agent.key_id)
        # Served from memory: this is what the cache saves (and why notices matter).
        assert (await there.get("/v1/mesh/me")).status_code == 200

        before = await _subscriber_ids(redis_client)
        assert len(before) >= 2 and await redis_client.pubsub_numsub(NOTIFY_CHANNEL)
        await redis_client.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        # Every hub is back on a new connection (new ids): each saw its old one end.
        deadline = time.monotonic() + 30
        while len((await _subscriber_ids(redis_client)) - before) < len(before):
            assert time.monotonic() < deadline, "the hubs did not resubscribe"
            await asyncio.sleep(0.05)
        problem(await there.get("/v1/mesh/me"), 401, "revoked")


@pytest.mark.parametrize("limited", [True, False], ids=["rate-limited", "no-limiter"])
async def test_a_change_whose_notice_has_not_arrived_is_seen_through_the_epoch(
        limited: bool, migrated: Settings, db: asyncpg.Pool,
        redis_client: aioredis.Redis) -> None:
    """The moment between a notice being published and the other process reading
    it: made permanent here by revoking in Postgres and moving only the cache
    epoch, with no notice at all. The other process learns of the change from the
    epoch its rate-limit call reads (or, with no limiter, a read of its own), and
    asks Postgres again (ADR 020)."""
    limits = {"ratelimit_enabled": True, "ratelimit_rate": 10_000.0,
              "ratelimit_burst": 10_000} if limited else {}
    async with _webs(migrated, **limits) as (one, other), \
            MeshFactory.connect(one.url) as mesh, \
            httpx.AsyncClient(base_url=other.url, timeout=30) as http:
        owner = await mesh.owner()
        agent = await owner.agent("fenced")
        a, b = await mesh.pair()
        there, a_there = on(agent, http), on(a, http)
        for _ in range(2):  # both facts are now served from the other process's memory
            assert (await there.get("/v1/mesh/me")).status_code == 200
            await a_there.send(b.agent_id, "hello")
        await db.execute("UPDATE api_keys SET revoked_at = now() WHERE key_id = $1", agent.key_id)
        await db.execute("DELETE FROM friendships WHERE (agent_a = $1 AND agent_b = $2) "
                         "OR (agent_a = $2 AND agent_b = $1)", a.agent_id, b.agent_id)
        assert (await there.get("/v1/mesh/me")).status_code == 200  # stale: no epoch moved
        await redis_client.incr(CACHE_EPOCH_KEY)
        problem(await there.get("/v1/mesh/me"), 401, "revoked")
        body = {"to_agent_id": b.agent_id, "message": {"parts": [{"kind": "text", "text": "x"}]}}
        problem(await a_there.post("/v1/mesh/tasks", body), 403, "neither friends")
