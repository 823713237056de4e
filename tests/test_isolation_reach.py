"""Who may reach whom, and what a refusal tells (ADR 030): an owner's own agents
trust each other; a broadcast to guessed ids does not say which of them exist."""

from __future__ import annotations

import uuid

import asyncpg

from tests.api_helpers import ok, problem, text_message
from tests.support.meshapi import MeshFactory


async def test_an_owners_own_agents_talk_without_a_friendship(mesh: MeshFactory) -> None:
    alice = await mesh.owner()
    planner, coder = await alice.agent("planner"), await alice.agent("coder")
    task = await planner.send(coder.agent_id, "write the parser")
    await coder.reply(task["task_id"], "done")
    ok(await coder.post("/v1/mesh/tasks", {"to_agent_id": planner.agent_id,
                                           "message": text_message("review it?")}), 201)
    listed = {f["agent_id"]: f["implicit"]
              for f in ok(await planner.get("/v1/mesh/friends"))["friends"]}
    assert listed == {coder.agent_id: True, alice.human: True}
    # Another owner's agent is still a stranger.
    other = await (await mesh.owner()).agent("other")
    problem(await planner.post("/v1/mesh/tasks", {"to_agent_id": other.agent_id,
                                                  "message": text_message("hi")}), 403)


async def test_a_broadcast_to_guessed_ids_tells_none_of_them_apart(
        mesh: MeshFactory, db: asyncpg.Pool) -> None:
    sender, friend = await mesh.pair()
    strangers = [await (await mesh.owner()).agent(f"s{i}") for i in range(10)]
    guessed = [f"ghost{i}-{uuid.uuid4().hex[:6]}@nobody" for i in range(990)]
    every = [s.agent_id for s in strangers] + guessed

    def body(ids: list[str]) -> dict[str, object]:
        return {"to_agent_ids": ids, "message": text_message("who is there?"),
                "timeout_seconds": 60}

    # One by one: each answer, with the id taken out, is the same bytes.
    shapes = set()
    for agent_id in [strangers[0].agent_id, guessed[0], strangers[1].agent_id, guessed[1]]:
        refused = problem(await sender.post("/v1/mesh/broadcasts",
                                            body([friend.agent_id, agent_id])), 403)
        assert refused["agent_ids"] == [agent_id]
        shapes.add(str(refused).replace(agent_id, "X"))
    assert len(shapes) == 1, shapes
    # All at once: the refusal names all 1,000 in the order given, nothing per id.
    refused = problem(await sender.post("/v1/mesh/broadcasts", body(every)), 403)
    assert refused["agent_ids"] == every
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE initiator = $1",
                             sender.agent_id) == 0
