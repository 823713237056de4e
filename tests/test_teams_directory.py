"""The directory: listed agents are found by skill and by words
of their description, unlisted ones never; friend requests from a result are
limited to ``friend_requests_pending_max`` pending per agent."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg

from tests.api_helpers import ok, problem
from tests.support.meshapi import AgentHandle, MeshFactory


async def found(agent: AgentHandle, **params: Any) -> list[str]:
    page = ok(await agent.get("/v1/mesh/directory", params=params))
    return [a["agent_id"] for a in page["agents"]]


async def test_listed_agents_are_found_unlisted_never(mesh: MeshFactory) -> None:
    word = f"zq{uuid.uuid4().hex[:8]}"  # a word no other test's agent has
    owner = await mesh.owner()
    listed = await owner.agent("translator", description=f"I translate {word} legal texts",
                               skills=[{"id": f"tr-{word}", "name": "translate",
                                        "tags": ["legal"]}])
    hidden = await owner.agent("hidden", description=f"I also translate {word} texts",
                               skills=[{"id": f"tr-{word}", "name": "translate"}])
    searcher = await (await mesh.owner()).agent("searcher")
    assert ok(await owner.get(f"/v1/agents/{listed.agent_id}"))["listed"] is False
    assert await found(searcher, q=word) == []  # off by default
    out = ok(await owner.patch(f"/v1/agents/{listed.agent_id}", {"listed": True}))
    assert out["listed"] is True
    assert await found(searcher, q=word) == [listed.agent_id]
    assert await found(searcher, q=f"legal {word}") == [listed.agent_id]
    assert await found(searcher, skill=f"tr-{word}") == [listed.agent_id]
    assert await found(searcher, q=word, skill="no-such-skill") == []
    assert hidden.agent_id not in await found(searcher, skill="translate", limit=100)
    [entry] = ok(await searcher.get("/v1/mesh/directory", params={"q": word}))["agents"]
    assert entry["description"].startswith("I translate") and entry["rank"] > 0
    assert "instructions" not in entry and "inbox_seq" not in entry
    # A name ranks above a mere mention in the description.
    other = await owner.agent("other", description=f"ask translator about {word}")
    ok(await owner.patch(f"/v1/agents/{other.agent_id}", {"listed": True}))
    assert await found(searcher, q=f"translator {word}") == [listed.agent_id, other.agent_id]
    # Paged.
    first = ok(await searcher.get("/v1/mesh/directory", params={"q": word, "limit": 1}))
    second = ok(await searcher.get("/v1/mesh/directory",
                                   params={"q": word, "limit": 1,
                                           "cursor": first["next_cursor"]}))
    assert len(first["agents"]) == len(second["agents"]) == 1
    assert second["next_cursor"] is None
    # Unlisted again: gone. A result is befriended the usual way.
    ok(await owner.patch(f"/v1/agents/{other.agent_id}", {"listed": False}))
    assert await found(searcher, q=word) == [listed.agent_id]
    ok(await searcher.post("/v1/mesh/friends/requests", {"to_agent_id": listed.agent_id}), 201)
    problem(await searcher.get("/v1/mesh/directory", params={"cursor": "@@"}), 400, "cursor")


async def test_pending_friend_requests_are_limited_per_agent(mesh: MeshFactory,
                                                             db: asyncpg.Pool) -> None:
    spammer = await (await mesh.owner()).agent("spammer")
    targets = [await (await mesh.owner()).agent(f"t{i}") for i in range(22)]
    results = await asyncio.gather(*(spammer.post("/v1/mesh/friends/requests",
                                                  {"to_agent_id": t.agent_id})
                                     for t in targets))
    codes = sorted(r.status_code for r in results)
    assert codes == [201] * 20 + [429] * 2
    refused = next(r for r in results if r.status_code == 429)
    problem(refused, 429, "pending")
    assert await db.fetchval("SELECT count(*) FROM friendships WHERE requester = $1",
                             spammer.agent_id) == 20
    # An answer frees a slot.
    accepted = next(t for t, r in zip(targets, results, strict=True) if r.status_code == 201)
    request_id = next(r.json()["request_id"] for r in results
                      if r.status_code == 201 and r.json()["to_agent_id"] == accepted.agent_id)
    ok(await accepted.post(f"/v1/mesh/friends/requests/{request_id}/accept"))
    late = next(t for t, r in zip(targets, results, strict=True) if r.status_code == 429)
    ok(await spammer.post("/v1/mesh/friends/requests", {"to_agent_id": late.agent_id}), 201)


async def test_a_nul_in_the_search_is_422_not_500(mesh: MeshFactory) -> None:
    a, _ = await mesh.pair()
    for name in ("q", "skill"):
        problem(await a.get("/v1/mesh/directory", params={name: "a\x00b"}), 422, name, "NUL")
