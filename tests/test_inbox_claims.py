"""A runtime's claims on inbox events against the real gateway (ADR 050):
``POST /v1/mesh/inbox/claim`` and how it meets a remote MCP client's
``mesh_check_inbox``, which takes the events after the acked cursor."""

from __future__ import annotations

from typing import Any

import asyncpg

from tests.api_helpers import ok
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.test_mcp_remote import call, session


async def a_pair(mesh: MeshFactory) -> tuple[AgentHandle, AgentHandle]:
    owner = await mesh.owner()
    a, b = await owner.agent("a"), await owner.agent("b")
    await mesh.befriend(a, b)
    return a, b


async def claim(agent: AgentHandle, seq: Any, consumer: Any = "meshd-one") -> bool:
    answer = ok(await agent.post("/v1/mesh/inbox/claim", {"seq": seq, "consumer": consumer}))
    assert answer["seq"] == seq
    return bool(answer["claimed"])


async def newest(agent: AgentHandle) -> int:
    return int(ok(await agent.get("/v1/mesh/me"))["inbox_seq"])


async def take(gateway: str, agent: AgentHandle) -> list[int]:
    """What one remote MCP client gets from ``mesh_check_inbox`` now (and acks)."""
    async with session(gateway, agent.api_key) as s:
        got, err = await call(s, "mesh_check_inbox", wait_seconds=0, limit=50)
    assert err is None, err
    return [e["seq"] for e in got["events"]]


async def test_a_held_event_is_the_runtimes_until_acked(mesh, gateway):
    a, b = await a_pair(mesh)
    ok(await b.post("/v1/mesh/inbox/ack", {"seq": await newest(b)}))
    await a.send(b.agent_id, "one")
    await a.send(b.agent_id, "two")
    first = await newest(b) - 1
    assert await claim(b, first)
    # Held and unacked: a remote client takes nothing, not even the event after it.
    assert await take(gateway, b) == []
    assert not await claim(b, first, "meshd-two")  # another runtime neither
    assert await claim(b, first)  # the holder again: a retry or a renewal
    ok(await b.post("/v1/mesh/inbox/ack", {"seq": first}))
    # Acked: the claim holds nothing back any more.
    assert await take(gateway, b) == [first + 1]
    # The remote client took and acked it: the runtime that sees it next skips it.
    assert not await claim(b, first + 1)


async def test_a_lapsed_claim_is_taken_over_once(mesh, gateway, db: asyncpg.Pool):
    a, b = await a_pair(mesh)
    ok(await b.post("/v1/mesh/inbox/ack", {"seq": await newest(b)}))
    await a.send(b.agent_id, "held by a runtime that went away")
    seq = await newest(b)
    assert await claim(b, seq)
    assert await take(gateway, b) == []
    await db.execute("UPDATE agents SET claim_until = now() - interval '1 second' "
                     "WHERE agent_id = $1", b.agent_id)
    assert await take(gateway, b) == [seq]
    # Back after the lapse, the runtime does not run it a second time.
    assert not await claim(b, seq)
    assert await take(gateway, b) == []


async def test_claims_validate_their_input(mesh):
    _a, b = await a_pair(mesh)
    top = await newest(b)
    assert not await claim(b, top + 1)  # no such event yet: nothing to hold
    assert not await claim(b, 0)  # nothing after the cursor at 0 either
    bad: list[dict[str, Any]] = [
        {"seq": True, "consumer": "x"}, {"seq": "1", "consumer": "x"}, {"seq": -1, "consumer": "x"},
        {"seq": 2**63, "consumer": "x"}, {"seq": 1}, {"seq": 1, "consumer": ""},
        {"seq": 1, "consumer": "a b"}, {"seq": 1, "consumer": "x" * 65},
        {"seq": 1, "consumer": "x", "extra": 1}, {"consumer": "x"},
        {"seq": 1, "consumer": "x", "ahead": 0}, {"seq": 1, "consumer": "x", "ahead": 501},
        {"seq": 1, "consumer": "x", "ahead": "3"}, {"seq": 1, "consumer": "x", "ahead": True},
        {"seq": 1, "consumer": "x", "ahead": 1.5}, {"seq": 1, "consumer": "x", "ahead": None},
    ]
    for body in bad:
        r = await b.post("/v1/mesh/inbox/claim", body)
        assert r.status_code == 422, (body, r.status_code)
        assert r.headers["content-type"].startswith("application/problem+json")
    r = await b.http.post("/v1/mesh/inbox/claim", json={"seq": 1, "consumer": "x"})
    assert r.status_code == 401


async def test_one_claim_covers_the_events_ahead_as_far_as_the_inbox_goes(mesh, gateway):
    a, b = await a_pair(mesh)
    ok(await b.post("/v1/mesh/inbox/ack", {"seq": await newest(b)}))
    for i in range(6):
        await a.send(b.agent_id, f"backlog {i}")
    top = await newest(b)
    first = top - 5
    answer = ok(await b.post("/v1/mesh/inbox/claim",
                             {"seq": first, "consumer": "meshd-one", "ahead": 4}))
    assert answer == {"seq": first, "claimed": True, "through": first + 3,
                      "lapses_in": answer["lapses_in"]} and answer["lapses_in"] > 0
    assert not await claim(b, first + 2, "meshd-two")  # inside the range: the holder's
    assert await claim(b, first + 3)  # the holder, inside its range: a renewal
    ok(await b.post("/v1/mesh/inbox/ack", {"seq": first + 2}))
    assert await take(gateway, b) == []  # first + 3 is still held
    ok(await b.post("/v1/mesh/inbox/ack", {"seq": first + 3}))
    # The range is done: a remote client takes what lies beyond it.
    assert await take(gateway, b) == [first + 4, first + 5]
    # Past the inbox's end a claim covers what there is.
    await a.send(b.agent_id, "one more")
    answer = ok(await b.post("/v1/mesh/inbox/claim",
                             {"seq": top + 1, "consumer": "meshd-one", "ahead": 500}))
    assert answer["claimed"] and answer["through"] == top + 1
