"""Admin API (app/api/admin.py): outbox counts, dead letters, retry without duplicates;
and the owner's context timeline (app/api/timeline.py).

The dead letters are real: a relay whose bus refuses records over 4 KiB
dead-letters the large events, exactly as an over-limit record is refused in
production. The "operator fix" is then a relay with the normal limit, and the
admin API re-queues the rows. Delivery is counted in Postgres (the inbox), in the
push stream ``inbox:{agent}`` and on an SSE connection.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis
from httpx_sse import aconnect_sse

from app.delivery.protocol import inbox_stream_key
from app.platform.settings import Settings
from tests.support.isolated import wait_until
from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle
from tests.support.pipeline import run_push, run_relay
from tests.support.servers import serve_app

BIG = "x" * 5000  # an event carrying this is over the 4 KiB test limit
SECRET = "confidential-dead-letter-content"

ADMIN_ENDPOINTS = [("GET", "/v1/admin/outbox"), ("GET", "/v1/admin/outbox/dead"),
                   ("POST", "/v1/admin/outbox/dead/retry"),
                   ("POST", "/v1/admin/outbox/dead/1/retry")]


@pytest.fixture
async def web(iso: Settings) -> AsyncIterator[str]:
    async with serve_app(iso) as url:
        yield url


@pytest.fixture
async def mesh(web: str) -> AsyncIterator[MeshFactory]:
    async with MeshFactory.connect(web) as factory:
        yield factory


@pytest.fixture
async def admin(mesh: MeshFactory) -> OwnerHandle:
    # "admin" is in base_settings.admin_usernames; the database is new, so this is its first use.
    return await mesh.owner("admin")


def ok(resp: httpx.Response, status: int = 200) -> Any:
    assert resp.status_code == status, f"{resp.request.url} → {resp.status_code}: {resp.text}"
    return resp.json()


async def outbox_settled(admin: OwnerHandle, *, failed: int) -> bool:
    counts = ok(await admin.get("/v1/admin/outbox"))["counts"]
    return counts["pending"] == 0 and counts["failed"] == failed


async def stream_seqs(redis: aioredis.Redis, agent_id: str) -> list[int]:
    entries = await redis.xrange(inbox_stream_key(agent_id))
    return [json.loads(fields[b"e"])["seq"] for _, fields in entries]


async def sse_seqs(url: str, agent: AgentHandle, until: int) -> list[int]:
    seqs: list[int] = []
    async with httpx.AsyncClient(base_url=url, timeout=None) as client, \
            aconnect_sse(client, "GET", "/v1/mesh/inbox/stream", params={"after": 0},
                         headers=agent.headers) as source:
        async for sse in source.aiter_sse():
            seqs.append(int(sse.id))
            if seqs[-1] >= until:
                return seqs
    return seqs


# --- access ------------------------------------------------------------------------

async def test_admin_endpoints_need_an_admin_owner(
        mesh: MeshFactory, admin: OwnerHandle) -> None:
    someone = await mesh.owner()
    agent = await someone.agent("probe")
    for method, path in ADMIN_ENDPOINTS:
        for caller in (someone, agent):
            resp = await caller.http.request(method, path, headers=caller.headers)
            assert resp.status_code == 403, (method, path, resp.text)
            assert resp.headers["content-type"].startswith("application/problem+json")
        resp = await mesh.http.request(method, path)
        assert resp.status_code == 401
    counts = ok(await admin.get("/v1/admin/outbox"))
    assert set(counts["counts"]) == {"pending", "sent", "failed"}
    # Validation of the admin's own input.
    assert (await admin.post("/v1/admin/outbox/dead/abc/retry")).status_code == 422
    assert (await admin.post("/v1/admin/outbox/dead/999999/retry")).status_code == 404
    assert (await admin.get("/v1/admin/outbox/dead", params={"limit": 0})).status_code == 422


async def test_removing_a_name_from_the_admin_list_revokes_admin_on_the_next_request(
        iso: Settings, uniq: str) -> None:
    """An admin whose name the operator took off MESH_ADMIN_USERNAMES keeps
    neither the admin API nor the console's operations page: not through the
    owner token issued while admin, not through a new login, not through a
    console session started while admin."""
    boss = f"boss{uniq}"
    listed = iso.model_copy(update={"admin_usernames": [boss]})
    async with serve_app(listed) as url, MeshFactory.connect(url) as mesh:
        owner = await mesh.owner(boss)
        ok(await owner.get("/v1/admin/outbox"))
        pre = (await mesh.http.get("/console/signin")).cookies["mesh_console_pre"]
        resp = await mesh.http.post("/console/signin", data={
            "username": boss, "password": owner.password, "csrf": pre},
            headers={"Cookie": f"mesh_console_pre={pre}"})
        assert resp.status_code == 303, resp.text
        console = resp.cookies["mesh_console"]
        resp = await mesh.http.get("/console/ops", headers={"Cookie": f"mesh_console={console}"})
        assert resp.status_code == 200
    # The operator restarts the gateway without the name.
    async with serve_app(iso.model_copy(update={"admin_usernames": []})) as url, \
            httpx.AsyncClient(base_url=url) as http:
        for path in ("/v1/admin/outbox", "/v1/admin/outbox/dead"):
            resp = await http.get(path, headers=owner.headers)
            assert resp.status_code == 403, resp.text
            assert "MESH_ADMIN_USERNAMES" in resp.json()["detail"]
        resp = await http.post("/v1/auth/login", json={"username": boss,
                                                       "password": owner.password})
        fresh = {"Authorization": f"Bearer {ok(resp)['access_token']}"}
        assert (await http.get("/v1/admin/outbox", headers=fresh)).status_code == 403
        resp = await http.get("/console/ops", headers={"Cookie": f"mesh_console={console}"})
        assert resp.status_code == 403
        # Still an owner: everything else works.
        assert (await http.get("/v1/agents", headers=owner.headers)).status_code == 200
    # Put back on the list, the same account is admin again.
    async with serve_app(listed) as url, httpx.AsyncClient(base_url=url) as http:
        ok(await http.get("/v1/admin/outbox", headers=owner.headers))


# --- dead letters and retry --------------------------------------------------------

async def test_dead_letters_are_listed_and_retried_into_exactly_one_delivery(
        iso: Settings, pool: asyncpg.Pool, web: str, mesh: MeshFactory, admin: OwnerHandle,
        redis_client: aioredis.Redis) -> None:
    a, b = await mesh.pair()  # b: seq 1 friend.request
    async with run_push(iso):
        async with run_relay(iso, max_record_bytes=4096):
            task = await a.send(b.agent_id, "small")                   # b seq 2
            await a.reply(task["task_id"], SECRET + BIG)                # b seq 3: dead
            await a.reply(task["task_id"], "small again")               # b seq 4
            await a.reply(task["task_id"], SECRET + BIG)                # b seq 5: dead
            await wait_until(lambda: outbox_settled(admin, failed=2), "2 dead letters")

        listing = await admin.get("/v1/admin/outbox/dead")
        dead = ok(listing)["dead_letters"]
        assert [d["event"]["seq"] for d in dead] == [3, 5]
        assert {d["recipient"] for d in dead} == {b.agent_id}
        assert {d["event"]["type"] for d in dead} == {"task.message"}
        assert all(d["attempts"] == 1 and "over the bus limit" in d["last_error"] for d in dead)
        assert all(d["payload_bytes"] > 4096 for d in dead)
        assert SECRET not in listing.text  # the envelope and error, never the content
        page = ok(await admin.get("/v1/admin/outbox/dead", params={"limit": 1}))
        assert [d["id"] for d in page["dead_letters"]] == [dead[0]["id"]]
        rest = ok(await admin.get("/v1/admin/outbox/dead",
                                  params={"after_id": page["next_after_id"], "limit": 10}))
        assert [d["id"] for d in rest["dead_letters"]] == [dead[1]["id"]]
        assert rest["next_after_id"] is None
        await wait_until(lambda: _has(redis_client, b.agent_id, 4), "seq 4 in the stream")
        assert await stream_seqs(redis_client, b.agent_id) == [1, 2, 4]

        # The operator raises the bus limit (a relay with the normal one) and retries.
        async with run_relay(iso):
            seq3, seq5 = dead[0]["id"], dead[1]["id"]
            assert ok(await admin.post(f"/v1/admin/outbox/dead/{seq5}/retry")) == \
                {"retried": 1, "ids": [seq5]}
            again = await admin.post(f"/v1/admin/outbox/dead/{seq5}/retry")
            assert again.status_code == 409
            assert again.json()["outbox_status"] in ("pending", "sent")
            # seq 5 is newer than anything in the stream: the push worker appends it.
            await wait_until(lambda: _has(redis_client, b.agent_id, 5), "seq 5 in the stream")

            # Two "retry all" and a "retry one" racing: the row is re-queued once.
            results = await asyncio.gather(
                admin.post("/v1/admin/outbox/dead/retry"),
                admin.post("/v1/admin/outbox/dead/retry"),
                admin.post(f"/v1/admin/outbox/dead/{seq3}/retry"))
            retried = sum(r.json()["retried"] for r in results if r.status_code == 200)
            assert retried == 1, [r.text for r in results]
            assert all(r.status_code in (200, 409) for r in results)
            await wait_until(lambda: outbox_settled(admin, failed=0), "no dead letters left")
            assert ok(await admin.get("/v1/admin/outbox"))["counts"]["sent"] == \
                await pool.fetchval("SELECT count(*) FROM outbox_events")

    # Postgres: every seq once, the retried ones with their content intact.
    events = (await b.inbox(after=0))["events"]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert [e["payload"]["message"]["parts"][0]["text"] for e in events[2:]] == \
        [SECRET + BIG, "small again", SECRET + BIG]
    # The push stream: seq 3 came back after seq 4 was written, so the stream (which
    # only appends newer seqs) skipped it; nothing is in it twice.
    assert await stream_seqs(redis_client, b.agent_id) == [1, 2, 4, 5]
    # SSE: the gap at 3 is filled from Postgres; each seq once, in order.
    assert await asyncio.wait_for(sse_seqs(web, b, until=5), 30) == [1, 2, 3, 4, 5]
    # One outbox row per event: a retry re-queues the row, it never copies it.
    assert await pool.fetchval(
        "SELECT count(*) FROM outbox_events WHERE key = $1", b.agent_id) == 5


async def _has(redis: aioredis.Redis, agent_id: str, seq: int) -> bool:
    return seq in await stream_seqs(redis, agent_id)


# --- the owner's timeline ----------------------------------------------------------

async def test_context_timeline_for_the_owners_of_participants(mesh: MeshFactory) -> None:
    alice, bob, eve = await mesh.owner(), await mesh.owner(), await mesh.owner()
    a, b = await alice.agent("a"), await bob.agent("b")
    await mesh.befriend(a, b)
    context = f"ctx-{uuid.uuid4().hex[:8]}"
    first = await a.send(b.agent_id, "question", context_id=context)
    await b.reply(first["task_id"], "answer")
    second = await b.send(a.agent_id, "follow-up", context_id=context)
    ok(await b.post(f"/v1/mesh/tasks/{second['task_id']}/status", {"state": "canceled"}))

    for owner in (alice, bob):
        timeline = ok(await owner.get(f"/v1/contexts/{context}/timeline"))
        assert [m["parts"][0]["text"] for m in timeline["messages"]] == \
            ["question", "answer", "follow-up"]
        assert [m["sender"] for m in timeline["messages"]] == [a.agent_id, b.agent_id,
                                                               b.agent_id]
        assert timeline["tasks"] == sorted([first["task_id"], second["task_id"]])
        assert timeline["messages"][-1]["task_state"] == "canceled"
        assert all(m["seq"] for m in timeline["messages"])
    # Not a participant's owner: as if the context did not exist.
    resp = await eve.get(f"/v1/contexts/{context}/timeline")
    assert resp.status_code == 404
    assert (await eve.get("/v1/contexts/%20bad/timeline")).status_code == 422
    # An agent token is not an owner token.
    assert (await a.get(f"/v1/contexts/{context}/timeline")).status_code == 403
    limited = ok(await alice.get(f"/v1/contexts/{context}/timeline", params={"limit": 2}))
    assert len(limited["messages"]) == 2 and limited["truncated"] is True
