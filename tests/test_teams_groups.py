"""Group messages, counted on the real pipeline: every member
gets every other member's message exactly once, in its own gap-free seq order,
over SSE (live, through relay → bus → push) and long-poll alike."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import defaultdict
from typing import Any

import asyncpg
import httpx
import redis.asyncio as aioredis
from httpx_sse import aconnect_sse

from app.domain.schemas import GroupMessageIn
from app.platform.settings import Settings
from app.services import group_messages
from app.services.mesh import Mesh
from app.services.principals import Agent
from tests.api_helpers import ok, problem, text_message
from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle

MEMBERS, POSTERS, POSTS = 50, 20, 20


async def group_of(owner: OwnerHandle, size: int) -> tuple[str, list[AgentHandle]]:
    gid = f"g-{uuid.uuid4().hex[:10]}"
    ok(await owner.post("/v1/groups", {"group_id": gid, "name": "Crew"}), 201)
    agents = list(await asyncio.gather(*(owner.agent(f"m{i}") for i in range(size))))
    for a in agents:
        ok(await owner.post(f"/v1/groups/{gid}/members", {"agent_id": a.agent_id}), 201)
    return gid, agents


async def long_poll_all(agent: AgentHandle) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await agent.inbox(after=after)
        if not page["events"]:
            return events
        events += page["events"]
        after = page["next_after"]


async def read_sse(url: str, agent: AgentHandle, count: int,
                   started: asyncio.Event) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client, \
            aconnect_sse(client, "GET", "/v1/mesh/inbox/stream", params={"after": 0},
                         headers=agent.headers) as source:
        started.set()
        async with asyncio.timeout(180):
            async for sse in source.aiter_sse():
                if not sse.data:
                    continue
                events.append(json.loads(sse.data))
                if len(events) == count:
                    return events
    return events


def check_member(events: list[dict[str, Any]], me: str,
                 sent: dict[str, list[str]]) -> None:
    """Gap-free seqs from 1, and exactly the other members' messages, each
    sender's in its posting order."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), me
    got: dict[str, list[str]] = defaultdict(list)
    for e in events:
        if e["type"] == "group.message":
            assert e["from_agent_id"] == e["payload"]["message"]["sender"] != me
            got[e["from_agent_id"]].append(e["payload"]["message"]["message_id"])
    assert dict(got) == {s: ids for s, ids in sent.items() if s != me}, me


async def test_fifty_members_twenty_posting_concurrently(mesh: MeshFactory) -> None:
    owner = await mesh.owner()
    gid, members = await group_of(owner, MEMBERS)
    posters = members[:POSTERS]
    # per member: its one group.notice, then everyone else's messages
    expected = {m.agent_id: 1 + POSTS * (POSTERS - (m in posters)) for m in members}
    url = str(mesh.http.base_url)
    started = [asyncio.Event() for _ in members]
    readers = [asyncio.create_task(read_sse(url, m, expected[m.agent_id], s))
               for m, s in zip(members, started, strict=True)]
    await asyncio.gather(*(s.wait() for s in started))
    sent: dict[str, list[str]] = {}

    async def post_all(poster: AgentHandle) -> None:
        sent[poster.agent_id] = []
        for i in range(POSTS):
            out = ok(await poster.post(f"/v1/mesh/groups/{gid}/messages",
                                       text_message(f"{poster.agent_id} #{i}")), 201)
            assert out["recipients"] == MEMBERS - 1 and out["group_id"] == gid
            sent[poster.agent_id].append(out["message_id"])

    await asyncio.gather(*(post_all(p) for p in posters))
    for member, sse_events in zip(members, await asyncio.gather(*readers), strict=True):
        check_member(sse_events, member.agent_id, sent)
        polled = await long_poll_all(member)
        check_member(polled, member.agent_id, sent)
        assert [e["event_id"] for e in polled] == [e["event_id"] for e in sse_events]
    event = polled[-1]
    assert event["type"] == "group.message" and event["task_id"] is None
    assert event["payload"]["group_id"] == gid and event["payload"]["group_name"] == "Crew"
    assert event["payload"]["message"]["parts"][0]["kind"] == "text"


async def test_members_only_and_unknown_group(mesh: MeshFactory) -> None:
    owner = await mesh.owner()
    gid, [a, b] = await group_of(owner, 2)
    outsider = await owner.agent("outsider")
    problem(await outsider.post(f"/v1/mesh/groups/{gid}/messages", text_message("hi")), 403,
            "not a member")
    problem(await a.post("/v1/mesh/groups/g-nope-nope/messages", text_message("hi")), 404,
            "unknown group")
    problem(await a.post(f"/v1/mesh/groups/{gid}/messages", {"parts": []}), 422)
    assert [e["type"] for e in await long_poll_all(outsider)] == []
    ok(await a.post(f"/v1/mesh/groups/{gid}/messages", text_message("hi")), 201)
    assert [e["type"] for e in await long_poll_all(a)] == ["group.notice"]  # not its own
    assert [e["type"] for e in await long_poll_all(b)] == ["group.notice", "group.message"]


async def test_large_group_is_written_in_batches_in_one_transaction(
        mesh: MeshFactory, migrated: Settings, db: asyncpg.Pool,
        redis_client: aioredis.Redis) -> None:
    """With a batch of 7, 29 recipients are 5 statements — still one transaction:
    every member's seq is gap-free and the count is exact."""
    owner = await mesh.owner()
    gid, members = await group_of(owner, 30)
    row = await db.fetchrow("SELECT owner_id, kind FROM agents WHERE agent_id = $1",
                            members[0].agent_id)
    me = Agent(agent_id=members[0].agent_id, owner_id=row["owner_id"], kind=row["kind"])
    body = GroupMessageIn.model_validate(text_message("batched"))
    service = Mesh(db, migrated, redis_client)
    outs = await asyncio.gather(*(group_messages.post(service, me, gid, body, batch=7)
                                  for _ in range(3)))
    assert [o.recipients for o in outs] == [29, 29, 29]
    for m in members[1:]:
        events = await long_poll_all(m)
        assert [e["seq"] for e in events] == [1, 2, 3, 4]
        assert sorted(e["payload"]["message"]["message_id"] for e in events[1:]) == \
            sorted(o.message_id for o in outs)
